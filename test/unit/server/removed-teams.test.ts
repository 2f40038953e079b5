// Removing a team in a cluster: the refusal without force counts the team's sandboxes on
// every node; the node the removal ran on kills its own at once, every other node kills the
// team's sandboxes it holds (running and paused) at its next sweep. Two nodes of fakes on one
// in-memory cluster store, as two nodes on one PostgreSQL.
import assert from "node:assert/strict";
import { it, type TestContext } from "node:test";
import { DEFAULT_TEAM_ID } from "../../../src/catalog/index.js";
import { killRemovedTeams, teamSandboxes } from "../../../src/server/removed-teams.js";
import { TeamAdmin } from "../../../src/tenancy/index.js";
import { createInput } from "../../contracts/sandbox-service.contract.js";
import { FakeNode } from "../../fakes/fake-node.js";
import { InMemoryCluster } from "../../fakes/in-memory-cluster.js";

async function twoNodes(t: TestContext) {
  const cluster = new InMemoryCluster();
  const nodes = await Promise.all(
    ["node-a", "node-b"].map((id) =>
      FakeNode.start({ maxSandboxes: 8, catalog: cluster.catalog(id) }),
    ),
  );
  t.after(() => Promise.all(nodes.map((node) => node.close())));
  const [a, b] = nodes;
  assert.ok(a && b);
  /** The cluster's count, as node-parts gives it: every node's live rows of the team. */
  const count = async (teamId: string) =>
    (await cluster.listSandboxes()).filter((r) => r.teamId === teamId && r.state !== "killed")
      .length;
  const admin = new TeamAdmin(cluster.teams, teamSandboxes(a.orchestrator, count));
  return { cluster, a, b, admin };
}

it("a team removed on one node loses its sandboxes on the others at their next sweep", async (t) => {
  const { cluster, a, b, admin } = await twoNodes(t);
  const { team } = await admin.createTeam("doomed", {});
  const here = await a.orchestrator.create(createInput("base", { teamId: team.id }));
  const running = await b.orchestrator.create(createInput("base", { teamId: team.id }));
  const paused = await b.orchestrator.create(createInput("base", { teamId: team.id }));
  await b.orchestrator.pause(paused.sandboxId);
  const kept = await b.orchestrator.create(createInput("base", { teamId: DEFAULT_TEAM_ID }));

  // Without force: refused for the sandboxes on node-b too, not only node-a's one.
  await assert.rejects(admin.removeTeam(team.id, false), /still has 3 running or paused/);
  await admin.removeTeam(team.id, true);
  assert.equal(a.orchestrator.list({ teamId: team.id }).length, 0, "node-a's went at once");
  assert.equal(b.orchestrator.list({ teamId: team.id }).length, 2, "node-b has not heard yet");

  assert.equal(await killRemovedTeams(b.orchestrator, cluster.teams, b.logger), 2);
  assert.deepEqual(b.orchestrator.list({ teamId: team.id }), []);
  for (const id of [here.sandboxId, running.sandboxId, paused.sandboxId]) {
    assert.equal((await a.catalog.findSandbox(id))?.state, "killed", id);
  }
  // The default team (and any team that still exists) is never swept.
  assert.equal(b.orchestrator.get(kept.sandboxId).state, "running");
  assert.equal(await killRemovedTeams(b.orchestrator, cluster.teams, b.logger), 0);
});
