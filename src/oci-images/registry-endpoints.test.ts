import assert from "node:assert/strict";
import { it } from "node:test";
import { registryBaseUrl, registryDestinations } from "./registry-endpoints.js";

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

it("trusts the hosts the operator listed: mirrors, insecure and private registries, no others", () => {
  const { trusted, insecure } = registryDestinations({
    mirrors: { "docker.io": "https://Mirror.lan:5443/v" },
    insecureRegistries: ["127.0.0.1:5000"],
    privateRegistries: ["Registry.Corp", "10.0.0.5:443"],
  });
  assert.deepEqual([...trusted].sort(), [
    "10.0.0.5",
    "127.0.0.1:5000",
    "mirror.lan:5443",
    "registry.corp",
  ]);
  assert.deepEqual([...insecure], ["127.0.0.1:5000"]);
});
