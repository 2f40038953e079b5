import assert from "node:assert/strict";
import { it } from "node:test";
import { describeSettings, loadConfig, loggableConfig } from "./config.js";

it("has defaults for everything", () => {
  const config = loadConfig({}, {});
  assert.equal(config.port, 3000);
  assert.equal(config.host, "127.0.0.1");
  assert.equal(config.dataDir, "/var/lib/warren");
  assert.equal(config.accel, "auto");
  assert.deepEqual(config.apiKeys, []);
  assert.equal(config.imagesDir, undefined, "unset: <data dir>/images");
  assert.equal(config.networkPrefix, "warren");
  assert.equal(config.networkCidr, "10.201.0.0/16");
  assert.ok(Object.isFrozen(config));
});

it("reads the environment and refuses bad values naming the variable", () => {
  const config = loadConfig(
    {},
    { WARREN_PORT: "8080", WARREN_API_KEYS: "a, b,", WARREN_ACCEL: "tcg" },
  );
  assert.equal(config.port, 8080);
  assert.deepEqual(config.apiKeys, ["a", "b"]);
  assert.equal(config.accel, "tcg");
  assert.throws(() => loadConfig({}, { WARREN_PORT: "http" }), /WARREN_PORT="http" is invalid/);
  assert.throws(() => loadConfig({}, { WARREN_ACCEL: "xen" }), /auto, kvm or tcg/);
});

it("checks the network prefix and block a second server (or a test run) uses", () => {
  const config = loadConfig(
    {},
    { WARREN_NETWORK_PREFIX: "wt3f9a", WARREN_NETWORK_CIDR: "10.202.0.0/16" },
  );
  assert.equal(config.networkPrefix, "wt3f9a");
  assert.equal(config.networkCidr, "10.202.0.0/16");
  for (const prefix of ["w", "Warren", "9w", "w-t", "abcdefghi"]) {
    assert.throws(
      () => loadConfig({}, { WARREN_NETWORK_PREFIX: prefix }),
      /WARREN_NETWORK_PREFIX=.* is invalid: expected 2 to 8 lowercase/,
    );
  }
  for (const cidr of ["10.202.0.0", "10.202.0.0/7", "10.202.0.0/31", "10.256.0.0/16", "x/16"]) {
    assert.throws(
      () => loadConfig({}, { WARREN_NETWORK_CIDR: cidr }),
      /WARREN_NETWORK_CIDR=.* is invalid: expected an IPv4 block/,
    );
  }
});

it("documents every setting", () => {
  const table = describeSettings();
  for (const variable of ["WARREN_PORT", "WARREN_HOME", "WARREN_MAX_SANDBOXES"]) {
    assert.match(table, new RegExp(variable));
  }
});

it("docs/configuration.md carries the current table", async () => {
  const { readFile } = await import("node:fs/promises");
  const doc = await readFile(new URL("../../docs/configuration.md", import.meta.url), "utf8");
  assert.ok(doc.includes(describeSettings()), "regenerate the table in docs/configuration.md");
});

it("reads registry mirrors, insecure and private registries", () => {
  const config = loadConfig(
    {},
    {
      WARREN_REGISTRY_MIRRORS: "docker.io=http://127.0.0.1:5000, ghcr.io=https://m.example/v",
      WARREN_INSECURE_REGISTRIES: "127.0.0.1:5000, registry.lan,[::1]:5000",
      WARREN_PRIVATE_REGISTRIES: "registry.corp:8443, 10.0.0.5",
    },
  );
  assert.deepEqual(config.privateRegistries, ["registry.corp:8443", "10.0.0.5"]);
  assert.deepEqual(loadConfig({}, {}).privateRegistries, []);
  assert.deepEqual(config.registryMirrors, {
    "docker.io": "http://127.0.0.1:5000",
    "ghcr.io": "https://m.example/v",
  });
  assert.deepEqual(config.insecureRegistries, ["127.0.0.1:5000", "registry.lan", "[::1]:5000"]);
  assert.deepEqual(loadConfig({}, {}).registryMirrors, {});
  for (const bad of ["docker.io", "=http://x", "docker.io=ftp://x", "docker.io=http://"]) {
    assert.throws(
      () => loadConfig({}, { WARREN_REGISTRY_MIRRORS: bad }),
      /WARREN_REGISTRY_MIRRORS=.* is invalid: expected comma-separated registry=/,
    );
  }
  assert.throws(
    () => loadConfig({}, { WARREN_INSECURE_REGISTRIES: "http://x:5000" }),
    /WARREN_INSECURE_REGISTRIES/,
  );
});

it("shows no secret to the logs: keys counted, the admin token's presence, no database password", () => {
  const config = loadConfig(
    {},
    {
      WARREN_API_KEYS: "key-one-secret,key-two-secret",
      WARREN_ADMIN_TOKEN: "admin-token-secret-value",
      WARREN_DATABASE_URL: "postgres://warren:db-pass-secret@db.internal:5432/warren",
    },
  );
  const shown = JSON.stringify(loggableConfig(config));
  for (const secret of [
    "key-one-secret",
    "key-two-secret",
    "admin-token-secret-value",
    "db-pass-secret",
  ]) {
    assert.ok(!shown.includes(secret), `${secret} in ${shown}`);
  }
  const logged = loggableConfig(config);
  assert.equal(logged.apiKeys, "2 extra");
  assert.equal(logged.adminToken, "(set)");
  assert.equal(logged.databaseUrl, "postgres://warren:***@db.internal:5432/warren");
  assert.equal(logged.port, config.port, "what is not secret shows as it is");
  assert.equal(loggableConfig(loadConfig({}, {})).adminToken, undefined);
});
