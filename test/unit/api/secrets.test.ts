// Secrets over the API, on a real SQLite catalog and a real key file: E2B's `/secrets`
// (create, list with pages, get by id or name, update to a new version, delete), values
// write-only and sealed at rest, each team's own.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { SqliteCatalog } from "../../../src/catalog/index.js";
import { SecretBox, Secrets } from "../../../src/secrets/index.js";
import { TeamAdmin } from "../../../src/tenancy/index.js";
import { TEST_ADMIN_TOKEN, testAuth } from "../../helpers/auth.js";
import { API_KEY, errorOf, type Harness, useApi } from "./api-harness.js";

const VALUE = "sk-live-0123456789abcdef";

describe("secrets API", () => {
  const dir = mkdtempSync(join(tmpdir(), "warren-secrets-api-"));
  let catalog: SqliteCatalog;
  let api: Harness;
  let keyB: string;
  let secrets: Secrets;

  before(async () => {
    catalog = await SqliteCatalog.open(join(dir, "catalog.sqlite"));
    secrets = new Secrets({
      catalog: catalog.secrets,
      box: await SecretBox.open(join(dir, "secrets")),
    });
    const admin = new TeamAdmin(catalog.teams, { count: async () => 0, killAll: async () => {} });
    api = useApi({
      authenticate: testAuth(() => new Set([API_KEY]), catalog.teams),
      teamAdmin: () => admin,
      secrets: () => secrets,
    });
    const made = await api.call("POST", "/admin/teams", {
      apiKey: null,
      headers: { "x-admin-token": TEST_ADMIN_TOKEN },
      body: { name: "b" },
    });
    keyB = (made.json() as { apiKey: string }).apiKey;
  });

  after(async () => {
    await catalog.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("creates, gets by id and name, updates to a new version, never answering the value", async () => {
    const created = await api.call("POST", "/secrets", {
      body: { name: "OpenAI-Key", value: VALUE, metadata: { owner: "ci" } },
    });
    assert.equal(created.statusCode, 201, created.body);
    const secret = created.json() as { secretID: string; name: string; currentVersion: number };
    assert.match(secret.secretID, /^sec_[0-9a-f]{32}$/);
    assert.equal(secret.name, "openai-key", "names are lower-cased");
    assert.equal(secret.currentVersion, 1);
    for (const path of [
      `/secrets/${secret.secretID}`,
      "/secrets/openai-key",
      "/secrets/OPENAI-KEY",
    ]) {
      const got = await api.call("GET", path);
      assert.equal(got.statusCode, 200, path);
      assert.deepEqual((got.json() as { metadata: unknown }).metadata, { owner: "ci" });
    }
    const updated = await api.call("POST", "/secrets/openai-key", { body: { value: "v2-value" } });
    assert.equal((updated.json() as { currentVersion: number }).currentVersion, 2);
    const everything = [created, updated, await api.call("GET", "/secrets")]
      .map((r) => r.body)
      .join("\n");
    assert.ok(
      !everything.includes(VALUE) && !everything.includes("v2-value"),
      "no answer carries a value",
    );
    // At rest: sealed in the catalog, under a key no other account reads.
    const file = readFileSync(join(dir, "catalog.sqlite")).toString("latin1");
    assert.ok(
      !file.includes(VALUE) && !file.includes("v2-value"),
      "the catalog file holds no value",
    );
    assert.equal(statSync(join(dir, "secrets", "values.key")).mode & 0o777, 0o600);
    assert.equal(statSync(join(dir, "secrets")).mode & 0o777, 0o700);
  });

  it("lists by name in pages; refuses bad names, duplicates and values, naming the field", async () => {
    for (const name of ["b-one", "a-two", "c-three"]) {
      assert.equal(
        (await api.call("POST", "/secrets", { body: { name, value: "x" } })).statusCode,
        201,
      );
    }
    const first = await api.call("GET", "/secrets?limit=2");
    const names = (first.json() as { name: string }[]).map((s) => s.name);
    assert.deepEqual(names, ["a-two", "b-one"]);
    const next = first.headers["x-next-token"] as string;
    const second = await api.call("GET", `/secrets?limit=2&nextToken=${next}`);
    assert.deepEqual(
      (second.json() as { name: string }[]).map((s) => s.name),
      ["c-three", "openai-key"],
    );
    assert.equal(second.headers["x-next-token"], undefined);

    const refused: [object, number, RegExp][] = [
      [{ name: "b-one", value: "x" }, 409, /already has a secret named 'b-one'/],
      [{ name: "sec_x", value: "x" }, 400, /body\/name/],
      [{ name: "has space", value: "x" }, 400, /body\/name/],
      [{ name: "ok-name", value: "" }, 400, /body\/value must be a non-empty string/],
      [
        { name: "ok-name", value: "x", metadata: { a: 1 } },
        400,
        /body\/metadata\/a must be a string/,
      ],
    ];
    for (const [body, status, message] of refused) {
      const res = await api.call("POST", "/secrets", { body });
      assert.equal(res.statusCode, status, JSON.stringify(body));
      assert.match(errorOf(res).message, message);
    }
    const big = await api.call("POST", "/secrets", {
      body: { name: "big", value: "v".repeat(70_000) },
    });
    assert.equal(big.statusCode, 400);
    assert.ok(!big.body.includes("vvvv"), "the refusal does not quote the value");
  });

  it("is each team's own: another team's secret reads as missing; delete", async () => {
    const mine = (await api.call("GET", "/secrets/openai-key")).json() as { secretID: string };
    for (const path of [`/secrets/${mine.secretID}`, "/secrets/openai-key"]) {
      assert.equal((await api.call("GET", path, { apiKey: keyB })).statusCode, 404);
      assert.equal((await api.call("DELETE", path, { apiKey: keyB })).statusCode, 404);
    }
    assert.deepEqual((await api.call("GET", "/secrets", { apiKey: keyB })).json(), []);
    assert.equal((await api.call("DELETE", `/secrets/${mine.secretID}`)).statusCode, 204);
    const gone = await api.call("GET", "/secrets/openai-key");
    assert.equal(gone.statusCode, 404);
    assert.match(errorOf(gone).message, /secret "openai-key" not found/);
  });

  it("binds a secret to its hosts when created; the binding never changes and is shown", async () => {
    const created = await api.call("POST", "/secrets", {
      body: { name: "bound", value: VALUE, allowedHosts: ["API.example.com", "*.example.org"] },
    });
    assert.equal(created.statusCode, 201, created.body);
    const secret = created.json() as { allowedHosts?: string[] };
    assert.deepEqual(secret.allowedHosts, ["api.example.com", "*.example.org"]);
    assert.deepEqual(
      ((await api.call("GET", "/secrets/bound")).json() as { allowedHosts?: string[] })
        .allowedHosts,
      ["api.example.com", "*.example.org"],
    );
    const change = await api.call("POST", "/secrets/bound", {
      body: { value: "v2", allowedHosts: ["evil.test"] },
    });
    assert.equal(change.statusCode, 400);
    assert.match(errorOf(change).message, /allowedHosts is set when a secret is created/);
    for (const allowedHosts of [
      ["10.0.0.1"],
      ["*"],
      "api.example.com",
      [""],
      Array(33).fill("a.test"),
    ]) {
      const bad = await api.call("POST", "/secrets", {
        body: { name: "bad-hosts", value: VALUE, allowedHosts },
      });
      assert.equal(bad.statusCode, 400, JSON.stringify(allowedHosts));
      assert.match(errorOf(bad).message, /^body\/allowedHosts/);
    }
    // Unbound secrets keep E2B's shape: no field at all.
    const plain = await api.call("POST", "/secrets", { body: { name: "plain", value: VALUE } });
    assert.equal((plain.json() as { allowedHosts?: unknown }).allowedHosts, undefined);
  });

  it("gives a bound secret's value for its hosts only", async () => {
    await api.call("POST", "/secrets", {
      body: { name: "only-api", value: VALUE, allowedHosts: ["api.example.com", "*.cdn.test"] },
    });
    assert.equal(await secrets.valueOf("default", "only-api", "api.example.com"), VALUE);
    assert.equal(await secrets.valueOf("default", "only-api", "x.cdn.test"), VALUE);
    await assert.rejects(secrets.valueOf("default", "only-api", "evil.example.com"), {
      reason: "secret_host_refused",
    });
    assert.equal(await secrets.valueOf("default", "plain", "anywhere.test"), VALUE, "unbound");
  });

  it("refuses a rule that would send a bound secret toward another host (400); unbound ones go anywhere", async () => {
    await api.call("POST", "/secrets", {
      body: { name: "api-key", value: VALUE, allowedHosts: ["api.example.com"] },
    });
    api.service.seed({ sandboxId: "ruled" });
    const rule = (domain: string, secret: string) => ({
      [domain]: [{ transform: { headers: { authorization: `Bearer \${e2b.secrets.${secret}}` } } }],
    });
    const put = (rules: object) => api.call("PUT", "/sandboxes/ruled/network", { body: { rules } });
    for (const domain of ["evil.test", "*.example.com", "api.example.com.evil.test"]) {
      const refused = await put(rule(domain, "api-key"));
      assert.equal(refused.statusCode, 400, domain);
      assert.match(errorOf(refused).message, /bound to other hosts/);
    }
    assert.equal((await put(rule("api.example.com", "api-key"))).statusCode, 204);
    assert.equal((await put(rule("evil.test", "plain"))).statusCode, 204, "unbound: E2B's");
    const create = await api.call("POST", "/sandboxes", {
      body: { templateID: "base", network: { rules: rule("evil.test", "api-key") } },
    });
    assert.equal(create.statusCode, 400);
    assert.match(
      errorOf(create).message,
      /^body\/network\/rules\/evil\.test names secret "api-key"/,
    );
  });
});
