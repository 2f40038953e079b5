// /events/webhooks over the API (E2B's statuses and bodies) on the real Webhooks service,
// SQLite catalog and SecretBox: 201 on create, 200 on delete with no body, the secret in no
// answer, 400s naming the field, 404 for an unknown id.
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it } from "node:test";
import { SqliteCatalog } from "../../../src/catalog/index.js";
import { Webhooks } from "../../../src/events/index.js";
import { SecretBox } from "../../../src/secrets/index.js";
import { errorOf, useApi } from "./api-harness.js";

it("creates, lists, gets, patches and deletes a webhook in E2B's shape", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "warren-api-webhooks-"));
  const catalog = await SqliteCatalog.open(join(dir, "catalog.db"));
  t.after(async () => {
    await catalog.close();
    await rm(dir, { recursive: true, force: true });
  });
  const webhooks = new Webhooks({
    catalog: catalog.webhooks,
    box: await SecretBox.open(join(dir, "secrets")),
    privateHosts: new Set(),
  });
  const { call } = useApi({ webhooks: () => webhooks });
  const body = {
    name: "trainer",
    url: "https://hooks.example.com/warren",
    events: ["sandbox.lifecycle.killed"],
    signatureSecret: "whsec-never-shown",
  };
  const made = await call("POST", "/events/webhooks", { body });
  assert.equal(made.statusCode, 201, made.body);
  const created = made.json() as Record<string, unknown>;
  assert.deepEqual(Object.keys(created).sort(), [
    "createdAt",
    "enabled",
    "events",
    "failures",
    "id",
    "name",
    "teamId",
    "url",
  ]);
  assert.equal(created.teamId, "default");
  const id = String(created.id);
  const listed = await call("GET", "/events/webhooks");
  assert.deepEqual(listed.json(), [created]);
  const patched = await call("PATCH", `/events/webhooks/${id}`, { body: { enabled: false } });
  assert.equal(patched.statusCode, 200);
  assert.equal(patched.json().enabled, false);
  assert.equal((await call("GET", `/events/webhooks/${id}`)).json().enabled, false);
  for (const res of [made, listed, patched]) assert.doesNotMatch(res.body, /whsec-never-shown/);

  const bad = await call("POST", "/events/webhooks", { body: { ...body, events: [] } });
  assert.equal(bad.statusCode, 400);
  assert.match(errorOf(bad).message, /^body\/events must specify at least one event type/);
  const array = await call("POST", "/events/webhooks", { body: [] });
  assert.equal(array.statusCode, 400);

  const deleted = await call("DELETE", `/events/webhooks/${id}`);
  assert.equal(deleted.statusCode, 200);
  assert.equal(deleted.body, "");
  const gone = await call("GET", `/events/webhooks/${id}`);
  assert.equal(gone.statusCode, 404);
  assert.equal((gone.json() as { reason: string }).reason, "webhook_not_found");
});
