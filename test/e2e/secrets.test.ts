// Secrets through the real e2b SDK's `Secret` against a real server: create with metadata,
// get by id and by name, list, update to a new version, exists, destroy; no call answers a
// value, and the server's data dir holds none in the clear.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { Secret, SecretNotFoundError } from "e2b";
import { useServer } from "../helpers/server.js";

const server = useServer();
const VALUE = `sk-e2e-${Date.now()}-do-not-leak`;

describe("secrets (e2b SDK)", () => {
  it("creates, reads, lists, updates and destroys a secret, never answering its value", async () => {
    const name = `api-key-${Date.now()}`;
    const created = await Secret.create(name, VALUE, { metadata: { owner: "e2e" } });
    assert.match(created.secretId, /^sec_[0-9a-f]{32}$/);
    assert.equal(created.name, name);
    assert.equal(created.version, 1);
    assert.deepEqual(created.metadata, { owner: "e2e" });
    const byName = await Secret.getInfo(name);
    assert.equal(byName.secretId, created.secretId);
    assert.ok(JSON.stringify(await Secret.getInfo(created.secretId)).indexOf(VALUE) === -1);
    const paginator = Secret.list({ limit: 50 });
    const listed = [];
    while (paginator.hasNext) listed.push(...(await paginator.nextItems()));
    assert.ok(listed.some((s) => s.secretId === created.secretId));
    const updated = await Secret.update(name, `${VALUE}-2`);
    assert.equal(updated.version, 2);
    assert.equal(await Secret.exists(name), true);
    const catalog = readFileSync(join(server.dataDir, "catalog.sqlite")).toString("latin1");
    assert.ok(!catalog.includes(VALUE), "the catalog holds the value sealed only");
    assert.equal(await Secret.destroy(created.secretId), true);
    assert.equal(await Secret.destroy(created.secretId), false);
    assert.equal(await Secret.exists(name), false);
    await assert.rejects(Secret.getInfo(name), SecretNotFoundError);
  });
});
