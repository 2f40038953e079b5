import assert from "node:assert/strict";
import { it } from "node:test";
import { parseWwwAuthenticate } from "./www-authenticate.js";

it("parses a registry's Bearer challenge, commas inside quotes included", () => {
  assert.deepEqual(
    parseWwwAuthenticate(
      'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/debian:pull,push"',
    ),
    [
      {
        scheme: "bearer",
        params: {
          realm: "https://auth.docker.io/token",
          service: "registry.docker.io",
          scope: "repository:library/debian:pull,push",
        },
      },
    ],
  );
});

it("parses Basic, unquoted values and several challenges", () => {
  assert.deepEqual(parseWwwAuthenticate('Basic realm="Registry Realm"'), [
    { scheme: "basic", params: { realm: "Registry Realm" } },
  ]);
  assert.deepEqual(parseWwwAuthenticate("Bearer realm=https://a/t, service=x, Basic realm=r"), [
    { scheme: "bearer", params: { realm: "https://a/t", service: "x" } },
    { scheme: "basic", params: { realm: "r" } },
  ]);
  assert.deepEqual(parseWwwAuthenticate("Negotiate"), [{ scheme: "negotiate", params: {} }]);
});
