// Many machines on one: a real PostgreSQL, three node servers each in a network namespace
// of its own (as separate hosts), and the gateway in front; the real e2b SDK pointed at the
// gateway alone (E2B_API_URL / E2B_SANDBOX_URL), as a user of a cluster would.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Sandbox, SandboxNotFoundError } from "e2b";
import { PostgresCluster } from "../../../src/catalog/index.js";
import { startCluster, type TestCluster } from "../../helpers/cluster.js";
import { leakCheck } from "../../helpers/leak-check.js";
import { waitFor } from "../../helpers/server.js";

const NODES = 3;
const SANDBOXES = 30;

let cluster: TestCluster;
let catalog: PostgresCluster;
const sandboxes: Sandbox[] = [];

before(async () => {
  cluster = await startCluster({
    nodes: NODES,
    // No warm pools: thirty VMs of three nodes are enough for two cores.
    nodeEnv: { WARREN_POOL_SIZE: "0", WARREN_POOL_MAX_PER_TEMPLATE: "0" },
  });
  catalog = await PostgresCluster.open({ connectionString: cluster.hostDatabaseUrl });
});

after(async () => {
  await Promise.allSettled(sandboxes.map((s) => s.kill()));
  await catalog?.close();
  await cluster?.stop();
  assert.deepEqual(await leakCheck(), [], "nothing of the cluster is left on the host");
});

async function nodeOf(sandboxId: string): Promise<string | undefined> {
  return (await catalog.locateSandbox(sandboxId))?.nodeId;
}

async function gatewayJson(path: string): Promise<unknown> {
  const res = await fetch(`${cluster.gateway.url}${path}`, {
    headers: { "x-api-key": cluster.apiKey },
  });
  assert.equal(res.status, 200, `${path}: ${res.status}`);
  return res.json();
}

describe("a cluster of three nodes behind a gateway", () => {
  it("every node registers and heartbeats", async () => {
    await waitFor("three nodes up with a load", async () => {
      const nodes = (await gatewayJson("/nodes")) as { state: string; load?: unknown }[];
      return nodes.length === NODES && nodes.every((n) => n.state === "up" && n.load);
    });
  });

  it(`creates ${SANDBOXES} sandboxes spread over the nodes, each running commands`, async () => {
    for (let batch = 0; batch < SANDBOXES / 6; batch++) {
      sandboxes.push(...(await Promise.all(Array.from({ length: 6 }, () => Sandbox.create()))));
    }
    const perNode = new Map<string, number>();
    for (const sandbox of sandboxes) {
      const node = await nodeOf(sandbox.sandboxId);
      assert.ok(node, `sandbox ${sandbox.sandboxId} has a node`);
      perNode.set(node, (perNode.get(node) ?? 0) + 1);
    }
    assert.equal(perNode.size, NODES, `sandboxes per node: ${JSON.stringify([...perNode])}`);
    for (const count of perNode.values()) assert.ok(count >= 5, `spread: ${[...perNode]}`);

    const outputs = await Promise.all(
      sandboxes.map(async (sandbox) => {
        const res = await sandbox.commands.run(`echo ${sandbox.sandboxId}; uname -r`);
        return res.stdout.split("\n")[0];
      }),
    );
    assert.deepEqual(
      outputs,
      sandboxes.map((s) => s.sandboxId),
    );
    const listed = await Sandbox.list().nextItems();
    const ids = new Set(listed.map((s) => s.sandboxId));
    for (const sandbox of sandboxes) assert.ok(ids.has(sandbox.sandboxId), "listed");
  });

  it("survives a gateway restart: sandboxes keep answering through the new one", async () => {
    await cluster.restartGateway();
    for (const sandbox of sandboxes.slice(0, 6)) {
      const res = await sandbox.commands.run("echo still here");
      assert.equal(res.stdout, "still here\n");
      assert.equal((await Sandbox.getInfo(sandbox.sandboxId)).state, "running");
    }
  });

  it("a node killed outright: its sandboxes are reported lost, new creates avoid it", async () => {
    const victim = cluster.nodes[NODES - 1];
    assert.ok(victim?.server);
    const doomed: Sandbox[] = [];
    for (const sandbox of sandboxes) {
      if ((await nodeOf(sandbox.sandboxId)) === victim.id) doomed.push(sandbox);
    }
    assert.ok(doomed.length > 0);
    victim.server.process.kill("SIGKILL");
    await waitFor(
      `${victim.id} marked down`,
      async () => {
        const nodes = (await gatewayJson("/nodes")) as { nodeID: string; state: string }[];
        return nodes.find((n) => n.nodeID === victim.id)?.state === "down";
      },
      20_000,
    );
    for (const sandbox of doomed) {
      const location = await catalog.locateSandbox(sandbox.sandboxId);
      assert.equal(location?.state, "killed");
      assert.match(location?.endedReason ?? "", /^lost/);
      await assert.rejects(Sandbox.getInfo(sandbox.sandboxId), SandboxNotFoundError);
    }
    const fresh = await Promise.all(Array.from({ length: 4 }, () => Sandbox.create()));
    sandboxes.push(...fresh);
    for (const sandbox of fresh) {
      assert.notEqual(await nodeOf(sandbox.sandboxId), victim.id);
      assert.equal((await sandbox.commands.run("echo ok")).stdout, "ok\n");
    }
    // The survivors are untouched.
    const survivor = sandboxes.find((s) => !doomed.includes(s));
    assert.ok(survivor);
    assert.equal((await survivor.commands.run("echo alive")).stdout, "alive\n");
  });

  it("the killed node comes back, reconciles and takes sandboxes again", async () => {
    const victim = cluster.nodes[NODES - 1];
    assert.ok(victim);
    await cluster.startNode(victim);
    await waitFor(`${victim.id} up again`, async () => {
      const nodes = (await gatewayJson("/nodes")) as { nodeID: string; state: string }[];
      return nodes.find((n) => n.nodeID === victim.id)?.state === "up";
    });
    // Its lost sandboxes stay lost: the restart reported nothing it did not have.
    const lost = await catalog.listSandboxes({ nodeId: victim.id, states: ["running"] });
    assert.deepEqual(lost, []);
  });
});
