// Team quotas in the orchestrator's admission (TeamQuotas beside Capacity), on fakes: a
// team at its limit gets 429 quota_exceeded naming the quota, concurrent creates can never
// pass it together, another team is not counted against it, and a pause gives room back.
import assert from "node:assert/strict";
import { it, type TestContext } from "node:test";
import type { TeamLimits } from "../../../src/catalog/index.js";
import { createInput } from "../../contracts/sandbox-service.contract.js";
import { FakeNode } from "../../fakes/fake-node.js";
import { InMemoryCluster } from "../../fakes/in-memory-cluster.js";

async function startNode(t: TestContext, limits: Record<string, TeamLimits>): Promise<FakeNode> {
  const node = await FakeNode.start({
    maxSandboxes: 16,
    teamLimits: async (teamId) => limits[teamId],
  });
  t.after(() => node.close());
  return node;
}

const isQuota = (name: RegExp) => (err: { reason?: string; message?: string }) =>
  err.reason === "quota_exceeded" && name.test(err.message ?? "");

it("concurrent creates of a team never pass its sandbox quota; other teams are not counted", async (t) => {
  const node = await startNode(t, { small: { maxSandboxes: 2 } });
  const { orchestrator } = node;
  const results = await Promise.allSettled(
    Array.from({ length: 5 }, () => orchestrator.create(createInput("base", { teamId: "small" }))),
  );
  const made = results.filter((r) => r.status === "fulfilled");
  assert.equal(made.length, 2);
  for (const r of results) {
    if (r.status === "rejected") assert.ok(isQuota(/running sandboxes/)(r.reason));
  }
  // Another team has no limit and does not count against "small".
  await orchestrator.create(createInput("base", { teamId: "big" }));
  await orchestrator.create(createInput("base", { teamId: "big" }));
  assert.equal(orchestrator.list({ teamId: "small" }).length, 2);
});

it("a pause gives the quota back; a resume over it is refused and the sandbox stays paused", async (t) => {
  const node = await startNode(t, { q: { maxSandboxes: 1 } });
  const { orchestrator } = node;
  const first = await orchestrator.create(createInput("base", { teamId: "q" }));
  await assert.rejects(
    orchestrator.create(createInput("base", { teamId: "q" })),
    isQuota(/running/),
  );
  await orchestrator.pause(first.sandboxId);
  const second = await orchestrator.create(createInput("base", { teamId: "q" }));
  await assert.rejects(orchestrator.connect(first.sandboxId, 60_000), isQuota(/running/));
  assert.equal(orchestrator.get(first.sandboxId).state, "paused");
  await orchestrator.kill(second.sandboxId);
  const { resumed } = await orchestrator.connect(first.sandboxId, 60_000);
  assert.equal(resumed, true);
});

it("fork children count: those over the quota fail alone, naming it", async (t) => {
  const node = await startNode(t, { f: { maxVcpus: 2 } });
  const { orchestrator } = node;
  const source = await orchestrator.create(createInput("base", { teamId: "f" }));
  const results = await orchestrator.fork(source.sandboxId, { count: 3 });
  const ok = results.filter((r) => "sandbox" in r);
  const failed = results.filter((r) => "error" in r);
  assert.equal(ok.length, 1);
  assert.equal(failed.length, 2);
  for (const r of failed) if ("error" in r) assert.equal(r.error.reason, "quota_exceeded");
  for (const r of ok) if ("sandbox" in r) assert.equal(r.sandbox.teamId, "f");
});

it("disk counts running and paused sandboxes of the team", async (t) => {
  const node = await startNode(t, { d: { maxDiskGiB: 0 } });
  await assert.rejects(
    node.orchestrator.create(createInput("base", { teamId: "d" })),
    isQuota(/disk/),
  );
});

/** Three nodes on one cluster store (as on one PostgreSQL), each with its own orchestrator. */
async function startCluster(t: TestContext, limits: Record<string, TeamLimits>) {
  const cluster = new InMemoryCluster();
  const nodes = await Promise.all(
    ["node-a", "node-b", "node-c"].map((id) =>
      FakeNode.start({
        maxSandboxes: 16,
        teamLimits: async (teamId) => limits[teamId],
        catalog: cluster.catalog(id),
      }),
    ),
  );
  t.after(() => Promise.all(nodes.map((node) => node.close())));
  return nodes;
}

it("a team's quota holds across nodes: concurrent creates on three nodes pass it once", async (t) => {
  // base is 1 vCPU here: room for one, eight asked for at once, spread over the nodes.
  const nodes = await startCluster(t, { c: { maxVcpus: 1 } });
  const results = await Promise.allSettled(
    Array.from({ length: 8 }, (_, i) =>
      (nodes[i % 3] as FakeNode).orchestrator.create(createInput("base", { teamId: "c" })),
    ),
  );
  assert.equal(results.filter((r) => r.status === "fulfilled").length, 1);
  for (const r of results) {
    if (r.status === "rejected") assert.ok(isQuota(/vCPUs/)(r.reason), String(r.reason));
  }
  // Nothing was left behind by the refused ones: the team's quota comes back with a kill.
  const made = nodes.flatMap((node) => node.orchestrator.list({ teamId: "c" }));
  assert.equal(made.length, 1);
});

it("a resume on one node counts what the team runs on the others", async (t) => {
  const [a, b] = await startCluster(t, { r: { maxSandboxes: 1 } });
  assert.ok(a && b);
  const paused = await a.orchestrator.create(createInput("base", { teamId: "r" }));
  await a.orchestrator.pause(paused.sandboxId);
  const elsewhere = await b.orchestrator.create(createInput("base", { teamId: "r" }));
  await assert.rejects(a.orchestrator.connect(paused.sandboxId, 60_000), isQuota(/running/));
  assert.equal(a.orchestrator.get(paused.sandboxId).state, "paused");
  assert.equal((await a.catalog.getSandbox(paused.sandboxId))?.state, "paused");
  await b.orchestrator.kill(elsewhere.sandboxId);
  const { resumed } = await a.orchestrator.connect(paused.sandboxId, 60_000);
  assert.equal(resumed, true);
});
