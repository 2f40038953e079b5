import assert from "node:assert/strict";
import { it } from "node:test";
import { registryBaseUrl } from "./registry-endpoints.js";

it("sends Docker Hub to its API host, others over HTTPS", () => {
  assert.equal(registryBaseUrl("docker.io"), "https://registry-1.docker.io");
  assert.equal(registryBaseUrl("ghcr.io"), "https://ghcr.io");
  assert.equal(registryBaseUrl("reg.lan:5000"), "https://reg.lan:5000");
});

it("allows plain HTTP only for insecure registries", () => {
  const insecureRegistries = ["reg.lan:5000", "127.0.0.1:5000"];
  assert.equal(registryBaseUrl("reg.lan:5000", { insecureRegistries }), "http://reg.lan:5000");
  assert.equal(
    registryBaseUrl("docker.io", {
      mirrors: { "docker.io": "http://127.0.0.1:5000/" },
      insecureRegistries,
    }),
    "http://127.0.0.1:5000",
  );
  assert.throws(
    () => registryBaseUrl("docker.io", { mirrors: { "docker.io": "http://127.0.0.1:5001" } }),
    /WARREN_INSECURE_REGISTRIES/,
  );
  assert.equal(
    registryBaseUrl("ghcr.io", { mirrors: { "ghcr.io": "https://mirror.example/ghcr" } }),
    "https://mirror.example/ghcr",
  );
});
