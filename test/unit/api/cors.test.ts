import assert from "node:assert/strict";
import { it } from "node:test";
import { useApi } from "./api-harness.js";

// CORS as E2B's API serves it, so the SDK runs from a web page: a preflight is answered
// without an API key, and the answers' cursor and rate-limit headers are readable.

it("answers a preflight from any origin without an API key, allowing the SDK's headers", async () => {
  const { app } = useApi();
  const res = await app.inject({
    method: "OPTIONS",
    url: "/v2/sandboxes",
    headers: {
      origin: "https://notebook.example.com",
      "access-control-request-method": "POST",
      "access-control-request-headers":
        "x-api-key, content-type, lang, sdk_runtime, package_version",
    },
  });
  assert.equal(res.statusCode, 204);
  assert.equal(res.headers["access-control-allow-origin"], "*");
  assert.match(String(res.headers["access-control-allow-methods"]), /POST/);
  const allowed = String(res.headers["access-control-allow-headers"]).toLowerCase();
  for (const header of ["x-api-key", "content-type", "lang", "sdk_runtime", "package_version"]) {
    assert.ok(
      allowed
        .split(",")
        .map((h) => h.trim())
        .includes(header),
      header,
    );
  }
  assert.equal(res.headers["access-control-allow-credentials"], undefined, "never credentials");
});

it("exposes the list cursor and rate-limit headers, also on errors", async () => {
  const { call } = useApi();
  const listed = await call("GET", "/v2/sandboxes", { headers: { origin: "https://a.example" } });
  assert.equal(listed.statusCode, 200);
  assert.equal(listed.headers["access-control-allow-origin"], "*");
  const exposed = String(listed.headers["access-control-expose-headers"]);
  for (const header of ["X-Next-Token", "X-Total-Running", "Retry-After"]) {
    assert.ok(exposed.includes(header), header);
  }
  const refused = await call("GET", "/v2/sandboxes", {
    apiKey: null,
    headers: { origin: "https://a.example" },
  });
  assert.equal(refused.statusCode, 401);
  assert.equal(refused.headers["access-control-allow-origin"], "*", "the page can read why");
});
