// E2B's lifecycle events through a real server and VMs: a sandbox's life through the unchanged
// SDK read back from GET /events/sandboxes/{id} and /events/sandboxes, in order and in E2B's
// shape, and another team's key sees none of it; and the same life delivered to a webhook's
// receiver (on the test's fake net, allowed by WARREN_WEBHOOK_PRIVATE_HOSTS), signed.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Sandbox } from "e2b";
import { webhookSignature } from "../../src/events/index.js";
import { FAKENET, FakeNet } from "../helpers/network/fake-net.js";
import { api, useServer, waitFor } from "../helpers/server.js";

const NET_PORT = 9190;
const RECEIVER = `${FAKENET.public1}:${FakeNet.httpPort(NET_PORT)}`;
const server = useServer({ WARREN_WEBHOOK_PRIVATE_HOSTS: RECEIVER });

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

describe("webhooks", () => {
  // Closed before the server's own after hook checks that nothing of the run is left.
  let net: FakeNet;
  before(async () => {
    net = await FakeNet.start(NET_PORT);
  });
  after(() => net.close());

  it("a webhook receives create, pause, resume and kill in order, each signed with its secret", async () => {
    const secret = `whsec-${Date.now()}`;
    const types = [
      "sandbox.lifecycle.created",
      "sandbox.lifecycle.paused",
      "sandbox.lifecycle.resumed",
      "sandbox.lifecycle.killed",
    ];
    const made = await api(server, "POST", "/events/webhooks", {
      name: "e2e receiver",
      url: `http://${RECEIVER}/hook`,
      events: types,
      signatureSecret: secret,
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const hook = made.body as { id: string };
    await net.agent.seen(); // what the fake net saw before is not this test's

    const sandbox = await Sandbox.create();
    await sandbox.pause();
    await sandbox.connect();
    await sandbox.kill();

    const received: { headers: Record<string, string>; body?: string }[] = [];
    await waitFor(
      "four deliveries",
      async () => {
        received.push(...(await net.agent.seen()));
        return received.length >= 4;
      },
      60_000,
    );
    const bodies = received.map((r) => JSON.parse(r.body ?? "{}") as Record<string, unknown>);
    assert.deepEqual(
      bodies.map((b) => b.type),
      types,
      "in order",
    );
    for (const [i, delivery] of received.entries()) {
      assert.equal(delivery.headers["e2b-webhook-id"], hook.id);
      assert.equal(delivery.headers["e2b-signature-version"], "v1");
      assert.equal(
        delivery.headers["e2b-signature"],
        webhookSignature(secret, delivery.body ?? ""),
      );
      assert.equal(bodies[i]?.sandbox_id, sandbox.sandboxId);
    }
    // The same events, by id, as the team lists them.
    const listed = await api(server, "GET", `/events/sandboxes/${sandbox.sandboxId}?orderAsc=true`);
    assert.deepEqual(
      (listed.body as { id: string }[]).map((e) => e.id),
      bodies.map((b) => b.id),
    );
    const status = await api(server, "GET", `/events/webhooks/${hook.id}`);
    const { lastDelivery, failures } = status.body as {
      lastDelivery?: { delivered: boolean; status: number };
      failures: number;
    };
    assert.deepEqual([lastDelivery?.delivered, lastDelivery?.status, failures], [true, 200, 0]);

    // Another team's key sees no webhook of this team's.
    const admin = { "x-admin-token": server.adminToken, "x-api-key": "" };
    const other = await api(server, "POST", "/admin/teams", { name: "hooks-other" }, admin);
    const key = (other.body as { apiKey: string }).apiKey;
    const theirs = await api(server, "GET", "/events/webhooks", undefined, { "x-api-key": key });
    assert.deepEqual(theirs.body, []);
    const probe = await api(server, "GET", `/events/webhooks/${hook.id}`, undefined, {
      "x-api-key": key,
    });
    assert.equal(probe.status, 404);
    assert.equal((await api(server, "DELETE", `/events/webhooks/${hook.id}`)).status, 200);
  });
});
