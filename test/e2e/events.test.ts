// E2B's lifecycle events through a real server and VMs: a sandbox's life through the unchanged
// SDK read back from GET /events/sandboxes/{id} and /events/sandboxes, in order and in E2B's
// shape, and another team's key sees none of it.
import assert from "node:assert/strict";
import { it } from "node:test";
import { Sandbox } from "e2b";
import { api, useServer } from "../helpers/server.js";

const server = useServer();

interface SandboxEvent {
  id: string;
  type: string;
  sandboxId: string;
  sandboxTeamId: string;
  sandboxTemplateId: string;
  timestamp: string;
  eventData: Record<string, unknown>;
}

async function events(path: string, apiKey = server.apiKey): Promise<SandboxEvent[]> {
  const res = await api(server, "GET", path, undefined, { "x-api-key": apiKey });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body as unknown as SandboxEvent[];
}

it("a sandbox's create, timeout, pause, resume and kill are its team's events, in order", async () => {
  const sandbox = await Sandbox.create({ metadata: { run: "events-e2e" } });
  const id = sandbox.sandboxId;
  const { templateId } = await sandbox.getInfo();
  await sandbox.setTimeout(120_000);
  await sandbox.pause();
  await sandbox.connect();
  assert.equal((await sandbox.commands.run("echo back")).stdout.trim(), "back");
  await sandbox.kill();

  const listed = await events(`/events/sandboxes/${id}?orderAsc=true&limit=100`);
  assert.deepEqual(
    listed.map((e) => e.type),
    [
      "sandbox.lifecycle.created",
      "sandbox.lifecycle.updated",
      "sandbox.lifecycle.paused",
      "sandbox.lifecycle.resumed",
      "sandbox.lifecycle.killed",
    ],
  );
  const times = listed.map((e) => Date.parse(e.timestamp));
  assert.deepEqual(
    times,
    [...times].sort((a, b) => a - b),
    "in time order",
  );
  assert.equal(new Set(listed.map((e) => e.id)).size, 5, "each its own id");
  for (const event of listed) {
    assert.equal(event.sandboxId, id);
    assert.equal(event.sandboxTemplateId, templateId);
    assert.deepEqual(event.eventData.sandbox_metadata, { run: "events-e2e" });
  }
  assert.equal(listed[4]?.eventData.kill_reason, "killed");
  assert.ok(Date.parse(String(listed[1]?.eventData.set_timeout)) > Date.now());

  // The team's own listing, newest first, filtered by type.
  const kills = await events("/events/sandboxes?types=sandbox.lifecycle.killed");
  assert.equal(kills[0]?.sandboxId, id);
  assert.equal(kills[0]?.id, listed[4]?.id);

  // Another team sees none of it, by id or in its own listing.
  const admin = { "x-admin-token": server.adminToken, "x-api-key": "" };
  const made = await api(server, "POST", "/admin/teams", { name: "other" }, admin);
  assert.equal(made.status, 201);
  const { apiKey: other } = made.body as { apiKey: string };
  assert.deepEqual(await events(`/events/sandboxes/${id}`, other), []);
  assert.deepEqual(await events("/events/sandboxes?limit=100", other), []);
});

it("refuses a bad query with a 400 that names the parameter", async () => {
  const res = await api(server, "GET", "/events/sandboxes?limit=500");
  assert.equal(res.status, 400);
  assert.match(String((res.body as { message: string }).message), /^querystring\/limit /);
});
