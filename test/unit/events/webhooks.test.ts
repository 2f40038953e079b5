// Webhooks (the API's service) and the Deliverer on a real SQLite catalog and SecretBox: what
// a create accepts and refuses, the secret sealed and never returned, teams kept apart; and
// deliveries as a receiver sees them (E2B's headers, a signature its secret verifies, the
// snake_case body), in order per sandbox, retried, then given up. The POST itself is a
// STAND-IN here (a function recording each attempt); post.test.ts sends real ones.
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it, type TestContext } from "node:test";
import { SqliteCatalog } from "../../../src/catalog/index.js";
import {
  Deliverer,
  type PostRequest,
  type PostResult,
  Webhooks,
  webhookSignature,
} from "../../../src/events/index.js";
import { SecretBox } from "../../../src/secrets/index.js";
import { sandboxRow } from "../../contracts/catalog.contract.js";
import { RecordingLogger } from "../../fakes/fake-node.js";

const CREATED = "sandbox.lifecycle.created";
const KILLED = "sandbox.lifecycle.killed";

async function rig(t: TestContext, privateHosts: string[] = [], pollMs?: number) {
  const dir = await mkdtemp(join(tmpdir(), "warren-webhooks-"));
  const catalog = await SqliteCatalog.open(join(dir, "catalog.db"));
  t.after(async () => {
    await catalog.close();
    await rm(dir, { recursive: true, force: true });
  });
  for (const id of ["team-a", "team-b"]) {
    await catalog.teams.putTeam({ id, name: id, createdAt: new Date().toISOString(), limits: {} });
  }
  const box = await SecretBox.open(join(dir, "secrets"));
  const webhooks = new Webhooks({
    catalog: catalog.webhooks,
    box,
    privateHosts: new Set(privateHosts),
  });
  const posts: PostRequest[] = [];
  let answers: PostResult[] = [];
  const deliverer = new Deliverer({
    catalog: catalog.webhooks,
    secretOf: (webhook) => webhooks.secretOf(webhook),
    post: async (request) => {
      posts.push(request);
      return answers.shift() ?? { status: 200 };
    },
    privateHosts,
    logger: new RecordingLogger(),
    retryDelaysMs: [0, 0],
    ...(pollMs !== undefined && { pollMs }),
  });
  const answer = (...next: PostResult[]) => {
    answers = next;
  };
  return { catalog, box, webhooks, deliverer, posts, answer };
}

const valid = {
  name: "trainer",
  url: "https://hooks.example.com/warren",
  events: [CREATED, KILLED],
  signatureSecret: "whsec-1",
};

it("creates with E2B's fields, seals the secret, keeps teams apart, caps a team at 32", async (t) => {
  const { catalog, webhooks } = await rig(t);
  const made = await webhooks.create("team-a", valid);
  assert.equal(made.enabled, true);
  assert.deepEqual(made.events, [CREATED, KILLED]);
  assert.ok(!("signatureSecret" in made) && !JSON.stringify(made).includes("whsec-1"));
  const row = await catalog.webhooks.getWebhook("team-a", made.id);
  assert.ok(row && !row.sealedSecret.includes("whsec-1"), "sealed at rest");
  assert.equal(webhooks.secretOf(row), "whsec-1");
  assert.deepEqual(await webhooks.get("team-a", made.id), made);
  await assert.rejects(webhooks.get("team-b", made.id), { reason: "webhook_not_found" });
  await assert.rejects(webhooks.delete("team-b", made.id), { reason: "webhook_not_found" });
  assert.deepEqual(await webhooks.list("team-b"), []);
  for (let i = 1; i < 32; i++) await webhooks.create("team-a", valid);
  await assert.rejects(webhooks.create("team-a", valid), { reason: "quota_exceeded" });
});

it("refuses each bad field naming it; a private address only where the operator allows", async (t) => {
  const { webhooks } = await rig(t, ["10.0.0.5:8080"]);
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ ...valid, name: "" }, /^body\/name /],
    [{ ...valid, url: "ftp://x.example.com/" }, /^body\/url must be a valid http or https URL/],
    [{ ...valid, url: "https://user:pw@x.example.com/" }, /^body\/url must not carry credentials/],
    [{ ...valid, url: "http://169.254.169.254/latest" }, /link-local address/],
    [{ ...valid, url: "http://10.0.0.5:9090/" }, /private address.*WARREN_WEBHOOK_PRIVATE_HOSTS/],
    [{ ...valid, events: [] }, /^body\/events must specify at least one event type/],
    [{ ...valid, events: ["sandbox.lifecycle.exploded"] }, /^body\/events has unknown type/],
    [{ ...valid, signatureSecret: undefined }, /^body\/signatureSecret is required/],
    [{ ...valid, enabled: "yes" }, /^body\/enabled must be true or false/],
  ];
  for (const [input, message] of cases) {
    await assert.rejects(webhooks.create("team-a", input), { reason: "invalid_argument", message });
  }
  const listed = await webhooks.create("team-a", { ...valid, url: "http://10.0.0.5:8080/hook" });
  assert.equal(listed.url, "http://10.0.0.5:8080/hook");
  const patched = await webhooks.update("team-a", listed.id, { enabled: false });
  assert.deepEqual([patched.enabled, patched.name], [false, "trainer"]);
  await assert.rejects(webhooks.update("team-a", listed.id, { events: [] }), {
    message: /^body\/events must specify at least one event type/,
  });
});

it("delivers each event signed, in order per sandbox; retries a failure, then gives up", async (t) => {
  const { catalog, webhooks, deliverer, posts, answer } = await rig(t);
  const hook = await webhooks.create("team-a", valid);
  await webhooks.create("team-b", valid);
  await catalog.insertSandbox(sandboxRow({ id: "sb1", metadata: { run: "r1" } }));
  const at = (s: number) => new Date(Date.now() - 10_000 + s * 1000).toISOString();
  await catalog.recordEvent({
    at: at(1),
    sandboxId: "sb1",
    kind: "sandbox.created",
    lifecycle: CREATED,
  });
  await catalog.recordEvent({
    at: at(2),
    sandboxId: "sb1",
    kind: "sandbox.paused",
    lifecycle: "sandbox.lifecycle.paused",
  });
  await catalog.recordEvent({
    at: at(3),
    sandboxId: "sb1",
    kind: "sandbox.killed",
    lifecycle: KILLED,
    detail: { reason: "killed" },
  });

  answer({ status: 503 });
  assert.equal(await deliverer.deliverDue(), 1);
  assert.equal(await deliverer.deliverDue(), 1, "the created event again, before the kill");
  assert.equal(await deliverer.deliverDue(), 1);
  assert.equal(await deliverer.deliverDue(), 0);
  assert.equal(posts.length, 3);
  const [first, retry, killed] = posts;
  const bodyOf = (p: PostRequest | undefined) => JSON.parse(p?.body ?? "{}");
  assert.equal(bodyOf(first).type, CREATED);
  assert.equal(bodyOf(retry).id, bodyOf(first).id, "the same event");
  assert.notEqual(retry?.headers["e2b-delivery-id"], first?.headers["e2b-delivery-id"]);
  assert.equal(bodyOf(killed).type, KILLED, "paused is not this webhook's");
  assert.deepEqual(bodyOf(killed).event_data.sandbox_metadata, { run: "r1" });
  assert.equal(bodyOf(killed).event_data.kill_reason, "killed");
  assert.equal(bodyOf(killed).sandbox_id, "sb1");
  assert.equal(bodyOf(killed).sandbox_team_id, "team-a");
  assert.equal(killed?.url, valid.url);
  assert.equal(killed?.headers["e2b-webhook-id"], hook.id);
  assert.equal(killed?.headers["e2b-signature-version"], "v1");
  assert.equal(killed?.headers["e2b-signature"], webhookSignature("whsec-1", killed?.body ?? ""));
  const after = await webhooks.get("team-a", hook.id);
  assert.deepEqual(
    [after.lastDelivery?.delivered, after.lastDelivery?.status, after.failures],
    [true, 200, 0],
  );

  // Three failures in a row (two retries here): given up, counted on the webhook.
  await catalog.recordEvent({
    at: at(4),
    sandboxId: "sb1",
    kind: "sandbox.created",
    lifecycle: CREATED,
  });
  answer({ error: "connection refused" }, { status: 500 }, { status: 404 });
  while ((await deliverer.deliverDue()) > 0) {}
  const failed = await webhooks.get("team-a", hook.id);
  assert.deepEqual([failed.lastDelivery?.status, failed.failures], [404, 1]);
  assert.equal(posts.length, 6);
});

it("gives a delivery up at once when its secret cannot be opened here, sending nothing", async (t) => {
  const { catalog, webhooks, deliverer, posts } = await rig(t);
  const hook = await webhooks.create("team-a", valid);
  // Sealed elsewhere (another node's key): what a node with the wrong key file sees.
  await catalog.webhooks.updateWebhook("team-a", hook.id, { sealedSecret: "v2::AAAA" });
  await catalog.insertSandbox(sandboxRow({ id: "sb1" }));
  const at = new Date(Date.now() - 1_000).toISOString();
  await catalog.recordEvent({ at, sandboxId: "sb1", kind: "sandbox.created", lifecycle: CREATED });
  assert.equal(await deliverer.deliverDue(), 1);
  assert.equal(await deliverer.deliverDue(), 0, "not queued again");
  assert.equal(posts.length, 0);
  const after = await webhooks.get("team-a", hook.id);
  assert.match(after.lastDelivery?.error ?? "", /signature secret cannot be opened/);
  assert.equal(after.failures, 1);
});

it("looks at once when woken by an event, not at the next poll", async (t) => {
  const { catalog, webhooks, deliverer, posts } = await rig(t, [], 60_000);
  await webhooks.create("team-a", valid);
  await catalog.insertSandbox(sandboxRow({ id: "sb1" }));
  deliverer.start();
  t.after(() => deliverer.stop());
  await new Promise((resolve) => setTimeout(resolve, 100)); // its first look: nothing due
  const at = new Date().toISOString();
  await catalog.recordEvent({ at, sandboxId: "sb1", kind: "sandbox.created", lifecycle: CREATED });
  const woken = Date.now();
  deliverer.wake();
  while (posts.length === 0 && Date.now() - woken < 5_000) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  assert.equal(posts.length, 1);
  assert.ok(Date.now() - woken < 2_000, "well before the 60 s poll");
});
