// Two teams through the gateway (stand-in nodes on the in-memory service, one cluster
// catalog): team B's key reaches none of team A's sandboxes, also where the gateway acts with
// the cluster's own credentials (a fork spread over nodes, a paused sandbox moved to resume
// it); and a team's quota holds across nodes, from the cluster catalog.
import assert from "node:assert/strict";
import { afterEach, it } from "node:test";
import { TeamAdmin } from "../../../src/tenancy/index.js";
import { startTestCluster, type TestCluster } from "../../helpers/gateway-cluster.js";

let running: TestCluster | undefined;
afterEach(async () => {
  await running?.close();
  running = undefined;
});

async function teamKey(c: TestCluster, limits = {}): Promise<{ key: string; teamId: string }> {
  const admin = new TeamAdmin(c.cluster.teams, { count: async () => 0, killAll: async () => {} });
  const { key, team } = await admin.createTeam("b", limits);
  return { key, teamId: team.id };
}

it("team B's key reaches none of team A's sandboxes through the gateway", async () => {
  const c = await startTestCluster({ nodes: 2, maxSandboxes: 1 });
  running = c;
  const { key } = await teamKey(c);
  const made = await c.call("POST", "/sandboxes", { body: { templateID: "base" } });
  assert.equal(made.status, 201);
  const a = ((await made.json()) as { sandboxID: string }).sandboxID;
  // The source's node is full: a fork would spread over the internal node API; B must not get one.
  const forked = await c.call("POST", `/sandboxes/${a}/fork`, { apiKey: key, body: { count: 1 } });
  assert.equal(forked.status, 404);
  assert.equal(((await forked.json()) as { reason: string }).reason, "sandbox_not_found");
  for (const node of c.nodes) {
    assert.deepEqual(node.service.callsOf("forkSpilling"), [], "no node was asked to fork");
    assert.deepEqual(node.service.callsOf("fork"), []);
  }
  // Paused on a node that goes down: B's connect must not move it.
  assert.equal((await c.call("POST", `/sandboxes/${a}/pause`)).status, 204);
  const from = (await c.cluster.locateSandbox(a))?.nodeId;
  await c.publishPause(a);
  await c.cluster.setNodeState(from as string, "down");
  const connect = await c.call("POST", `/sandboxes/${a}/connect`, {
    apiKey: key,
    body: { timeout: 60 },
  });
  assert.equal(connect.status, 404);
  assert.equal((await c.cluster.locateSandbox(a))?.nodeId, from, "not moved");
  const killed = await c.call("DELETE", `/sandboxes/${a}`, { apiKey: key });
  assert.equal(killed.status, 404);
});

it("a team's quota of running sandboxes holds across nodes", async () => {
  const c = await startTestCluster({ nodes: 3 });
  running = c;
  const { key, teamId } = await teamKey(c, { maxSandboxes: 2 });
  const statuses: number[] = [];
  for (let i = 0; i < 4; i++) {
    const res = await c.call("POST", "/sandboxes", { apiKey: key, body: { templateID: "base" } });
    statuses.push(res.status);
    if (res.status === 429) {
      const body = (await res.json()) as { reason: string; message: string };
      assert.equal(body.reason, "quota_exceeded");
      assert.match(body.message, /running sandboxes/);
    }
  }
  assert.deepEqual(statuses, [201, 201, 429, 429]);
  const held = (await c.cluster.listSandboxes()).filter((row) => row.teamId === teamId);
  assert.equal(held.length, 2);
  // The default team is not counted against it.
  assert.equal((await c.call("POST", "/sandboxes", { body: { templateID: "base" } })).status, 201);
});
