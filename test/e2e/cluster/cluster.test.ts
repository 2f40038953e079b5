// Many machines on one: a real PostgreSQL, three node servers each in a network namespace
// of its own (as separate hosts), a shared snapshot store (an S3-compatible server the test
// starts, or with WARREN_TEST_CLUSTER_STORE=dir a shared directory), and the gateway in
// front; the real e2b SDK pointed at the gateway alone (E2B_API_URL / E2B_SANDBOX_URL), as a
// user of a cluster would.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Sandbox, SandboxNotFoundError } from "e2b";
import pg from "pg";
import { PostgresCluster } from "../../../src/catalog/index.js";
import { startCluster, type TestCluster } from "../../helpers/cluster.js";
import { leakCheck } from "../../helpers/leak-check.js";
import { waitFor } from "../../helpers/server.js";

const NODES = 3;
const SANDBOXES = 30;
/** Per node: thirty sandboxes fit; a fork ×32 does not fit beside its source. */
const NODE_MAX_SANDBOXES = 20;
const FORK_COUNT = 32;

const STORE = process.env.WARREN_TEST_CLUSTER_STORE === "dir" ? "dir" : "s3";

let cluster: TestCluster;
let catalog: PostgresCluster;
let db: pg.Client;
const sandboxes: Sandbox[] = [];

before(async () => {
  console.log(`# shared snapshot store: ${STORE} (WARREN_TEST_CLUSTER_STORE=s3|dir)`);
  cluster = await startCluster({
    nodes: NODES,
    store: STORE,
    // No warm pools: thirty VMs of three nodes are enough for two cores.
    nodeEnv: {
      WARREN_POOL_SIZE: "0",
      WARREN_POOL_MAX_PER_TEMPLATE: "0",
      WARREN_MAX_SANDBOXES: String(NODE_MAX_SANDBOXES),
      WARREN_MAX_FORK_COUNT: String(FORK_COUNT),
    },
  });
  catalog = await PostgresCluster.open({ connectionString: cluster.hostDatabaseUrl });
  db = new pg.Client({ connectionString: cluster.hostDatabaseUrl });
  await db.connect();
});

after(async () => {
  await Promise.allSettled(sandboxes.map((s) => s.kill()));
  await db?.end();
  await catalog?.close();
  await cluster?.stop();
  assert.deepEqual(await leakCheck(), [], "nothing of the cluster is left on the host");
});

async function nodeOf(sandboxId: string): Promise<string | undefined> {
  return (await catalog.locateSandbox(sandboxId))?.nodeId;
}

/** Whether a sandbox is paused on a snapshot published to the shared store. */
async function pausedAndPublished(sandboxId: string): Promise<boolean> {
  const { rows } = await db.query<{ published_at: Date | null }>(
    `SELECT p.published_at FROM sandboxes s JOIN snapshots p ON p.id = s.snapshot_id
     WHERE s.id = $1 AND s.state = 'paused'`,
    [sandboxId],
  );
  return rows[0]?.published_at != null;
}

async function onNode(nodeId: string): Promise<Sandbox[]> {
  const held: Sandbox[] = [];
  for (const sandbox of sandboxes) {
    if ((await nodeOf(sandbox.sandboxId)) === nodeId) held.push(sandbox);
  }
  return held;
}

/** Leaves a file and a background process in the sandbox, to find both after a move. */
async function leaveTraces(sandbox: Sandbox): Promise<void> {
  await sandbox.files.write("/tmp/trace.txt", `kept by ${sandbox.sandboxId}`);
  await sandbox.commands.run("sleep 3600", { background: true, timeoutMs: 0 });
}

/** The traces `keptBy` left (a fork child has its source's). */
async function assertTraces(sandbox: Sandbox, keptBy = sandbox.sandboxId): Promise<void> {
  assert.equal(await sandbox.files.read("/tmp/trace.txt"), `kept by ${keptBy}`);
  const ps = await sandbox.commands.run("pgrep -x sleep || true");
  assert.match(ps.stdout, /^\d+/m, "the background process survived the move");
}

/** A gateway route of the admin's (`/nodes`: the cluster's nodes need the admin token). */
async function gatewayJson(path: string): Promise<unknown> {
  const res = await fetch(`${cluster.gateway.url}${path}`, {
    headers: { "x-admin-token": cluster.adminToken },
  });
  assert.equal(res.status, 200, `${path}: ${res.status}`);
  return res.json();
}

/** A sandbox's lifecycle events through the gateway, oldest first: type and eventData. */
async function eventsOf(sandboxId: string): Promise<[string, Record<string, unknown>][]> {
  const res = await fetch(
    `${cluster.gateway.url}/events/sandboxes/${sandboxId}?orderAsc=true&limit=100`,
    { headers: { "x-api-key": cluster.apiKey } },
  );
  assert.equal(res.status, 200);
  const events = (await res.json()) as { type: string; eventData: Record<string, unknown> }[];
  return events.map((e) => [e.type.replace("sandbox.lifecycle.", ""), e.eventData]);
}

describe("a cluster of three nodes behind a gateway", () => {
  it("every node registers (its cluster port, mutual TLS) and heartbeats; the database holds no key to it", async () => {
    await waitFor("three nodes up with a load", async () => {
      const nodes = (await gatewayJson("/nodes")) as { state: string; load?: unknown }[];
      return nodes.length === NODES && nodes.every((n) => n.state === "up" && n.load);
    });
    const registered = (await gatewayJson("/nodes")) as { nodeID: string; url: string }[];
    for (const node of cluster.nodes) {
      assert.equal(registered.find((r) => r.nodeID === node.id)?.url, node.url);
      assert.match(node.url, /^https:/);
      // Plain HTTP to the cluster port gets nothing; the plain port has no internal API.
      await assert.rejects(fetch(`${node.url.replace("https:", "http:")}/health`));
      const internal = await fetch(`${node.plainUrl}/internal/node/drain`, {
        method: "POST",
        headers: { "x-api-key": cluster.apiKey, "x-warren-cluster-key": "anything" },
      });
      assert.equal(internal.status, 403);
    }
    const { rows } = await db.query<{ table: string | null }>(
      "SELECT to_regclass('cluster_secrets')::text AS table",
    );
    assert.deepEqual(rows, [{ table: null }]);
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

  it("a drained node pauses and publishes its sandboxes; they resume on the other nodes", async () => {
    const drained = cluster.nodes[0];
    assert.ok(drained);
    const held = await onNode(drained.id);
    const traced = held.slice(0, 2);
    for (const sandbox of traced) await leaveTraces(sandbox);

    const res = await fetch(`${cluster.gateway.url}/nodes/${drained.id}/drain`, {
      method: "POST",
      headers: { "x-admin-token": cluster.adminToken },
    });
    assert.equal(res.status, 204);
    await waitFor(
      `${held.length} sandboxes of ${drained.id} paused and published`,
      async () => {
        for (const sandbox of held) {
          if (!(await pausedAndPublished(sandbox.sandboxId))) return false;
        }
        return true;
      },
      180_000,
    );
    const fresh = await Sandbox.create();
    sandboxes.push(fresh);
    assert.notEqual(await nodeOf(fresh.sandboxId), drained.id, "no creates on a draining node");

    // Resumed through the gateway: each lands on another node, fetched from the store.
    await Promise.all(held.map((sandbox) => Sandbox.connect(sandbox.sandboxId)));
    for (const sandbox of held) {
      const node = await nodeOf(sandbox.sandboxId);
      assert.ok(node && node !== drained.id, `${sandbox.sandboxId} moved to ${node}`);
      assert.equal((await Sandbox.getInfo(sandbox.sandboxId)).state, "running");
    }
    for (const sandbox of traced) await assertTraces(sandbox);
    assert.deepEqual(await catalog.listSandboxes({ nodeId: drained.id }), [], "none left on it");
    // Its life on two nodes, told as one through the gateway.
    assert.deepEqual(
      (await eventsOf(traced[0]?.sandboxId ?? "")).map(([type]) => type),
      ["created", "paused", "resumed"],
    );

    const undrain = await fetch(`${cluster.gateway.url}/nodes/${drained.id}/undrain`, {
      method: "POST",
      headers: { "x-admin-token": cluster.adminToken },
    });
    assert.equal(undrain.status, 204);
  });

  it("a persistent snapshot taken on one node starts sandboxes on the others", async () => {
    const source = sandboxes[sandboxes.length - 1];
    assert.ok(source);
    await leaveTraces(source);
    const name = `cluster${Date.now()}`;
    const snapshot = await source.createSnapshot({ name });
    const origin = await nodeOf(source.sandboxId);
    await waitFor(
      `${snapshot.snapshotId} published`,
      async () => {
        const { rows } = await db.query<{ published_at: Date | null }>(
          `SELECT p.published_at FROM template_aliases a
           JOIN templates t ON t.scope = a.scope AND t.id = a.template_id
           JOIN snapshots p ON p.id = t.snapshot_id WHERE a.alias = $1`,
          [name],
        );
        return rows[0]?.published_at != null;
      },
      120_000,
    );
    const children = await Promise.all(
      Array.from({ length: 4 }, () => Sandbox.create(snapshot.snapshotId)),
    );
    try {
      const nodes = new Set(await Promise.all(children.map((c) => nodeOf(c.sandboxId))));
      assert.ok(
        [...nodes].some((node) => node !== origin),
        `started beside ${origin} only: ${[...nodes]}`,
      );
      for (const child of children) {
        assert.equal(await child.files.read("/tmp/trace.txt"), `kept by ${source.sandboxId}`);
      }
    } finally {
      await Promise.allSettled(children.map((child) => child.kill()));
    }
    assert.equal(await Sandbox.deleteSnapshot(snapshot.snapshotId), true);
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
    const doomed = await onNode(victim.id);
    // One is paused (and published) before: it outlives its node.
    const kept = doomed.pop();
    assert.ok(kept && doomed.length > 0);
    await leaveTraces(kept);
    await kept.pause();
    await waitFor(`${kept.sandboxId} published`, () => pausedAndPublished(kept.sandboxId), 120_000);
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
      // Its team is told it was killed, though its node never said so.
      const [type, data] = (await eventsOf(sandbox.sandboxId)).at(-1) ?? [];
      assert.equal(type, "killed");
      assert.match(String(data?.kill_reason), /^lost: its node stopped answering/);
    }
    const fresh = await Promise.all(Array.from({ length: 4 }, () => Sandbox.create()));
    sandboxes.push(...fresh);
    for (const sandbox of fresh) {
      assert.notEqual(await nodeOf(sandbox.sandboxId), victim.id);
      assert.equal((await sandbox.commands.run("echo ok")).stdout, "ok\n");
    }
    // The survivors are untouched.
    const survivor = sandboxes.find((s) => !doomed.includes(s) && s !== kept);
    assert.ok(survivor);
    assert.equal((await survivor.commands.run("echo alive")).stdout, "alive\n");

    // The paused one was not lost: its resume lands on a live node, everything in place.
    assert.equal((await catalog.locateSandbox(kept.sandboxId))?.state, "paused");
    await Sandbox.connect(kept.sandboxId);
    const now = await nodeOf(kept.sandboxId);
    assert.ok(now && now !== victim.id, `resumed on ${now}`);
    await assertTraces(kept);
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

  it("a team's quota holds across the nodes: concurrent creates pass it once, a resume counts the others", async () => {
    const [node] = cluster.nodes;
    assert.ok(node);
    /** A team with `limits`, and what 8 concurrent creates of its gave: exactly one started. */
    const concurrentCreates = async (name: string, limits: Record<string, number>) => {
      const made = await fetch(`${node.plainUrl}/admin/teams`, {
        method: "POST",
        headers: { "x-admin-token": cluster.adminToken, "content-type": "application/json" },
        body: JSON.stringify({ name, limits }),
      });
      assert.equal(made.status, 201, await made.clone().text());
      const { apiKey } = (await made.json()) as { apiKey: string };
      const settled = await Promise.allSettled(
        Array.from({ length: 8 }, () => Sandbox.create({ apiKey })),
      );
      const started = settled.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
      sandboxes.push(...started);
      const refused = settled.flatMap((r) => (r.status === "rejected" ? [String(r.reason)] : []));
      assert.equal(
        started.length,
        1,
        `${name}: started ${started.length}; refused: ${refused.join("; ")}`,
      );
      for (const why of refused) assert.match(why, /quota|Rate limit/i);
      return { apiKey, started };
    };
    // Room for one base sandbox (1 vCPU, 512 MiB), by vCPUs alone: the gateway's own check
    // counts each create at the least a sandbox takes, so several reach the nodes, which must
    // admit one in all.
    const byVcpus = await concurrentCreates("one-vcpu", { maxVcpus: 1 });
    await Promise.all(byVcpus.started.map((s) => s.kill()));
    // And by memory, the team whose paused sandbox's resume must count the others.
    const { apiKey, started } = await concurrentCreates("one-at-a-time", { maxMemoryMiB: 512 });

    const [first] = started;
    assert.ok(first);
    await first.pause();
    const second = await Sandbox.create({ apiKey });
    sandboxes.push(second);
    // Paused elsewhere or here: its resume counts the team's running sandbox on any node.
    await assert.rejects(Sandbox.connect(first.sandboxId, { apiKey }), /quota|Rate limit/i);
    await second.kill();
    const resumed = await Sandbox.connect(first.sandboxId, { apiKey });
    assert.equal((await resumed.commands.run("echo back")).stdout, "back\n");
    await resumed.kill();
  });

  it(`forks one ×${FORK_COUNT} across the nodes, every child from the one capture`, async () => {
    await Promise.allSettled(sandboxes.splice(0).map((s) => s.kill()));
    const source = await Sandbox.create();
    sandboxes.push(source);
    await leaveTraces(source);
    await waitFor("the nodes' loads show the kills", async () => {
      const nodes = (await gatewayJson("/nodes")) as { load?: { sandboxes: number } }[];
      return nodes.reduce((sum, n) => sum + (n.load?.sandboxes ?? 0), 0) <= 1;
    });
    const results = await source.fork({ count: FORK_COUNT, requestTimeoutMs: 600_000 });
    const children = results.filter((r): r is Sandbox => r instanceof Sandbox);
    sandboxes.push(...children);
    assert.deepEqual(
      results.filter((r) => r instanceof Error).map(String),
      [],
      "every child started",
    );
    assert.equal(children.length, FORK_COUNT);
    const perNode = new Map<string, number>();
    for (const child of children) {
      const node = (await nodeOf(child.sandboxId)) ?? "none";
      perNode.set(node, (perNode.get(node) ?? 0) + 1);
    }
    const sourceNode = await nodeOf(source.sandboxId);
    assert.ok(perNode.size >= 2, `children per node: ${JSON.stringify([...perNode])}`);
    assert.ok((perNode.get(sourceNode ?? "") ?? 0) <= NODE_MAX_SANDBOXES - 1, "within its room");
    // One capture: every child stands on it, with the source's file and its process.
    const { rows } = await db.query<{ snapshot_id: string }>(
      "SELECT DISTINCT snapshot_id FROM sandboxes WHERE id = ANY ($1)",
      [children.map((c) => c.sandboxId)],
    );
    assert.equal(rows.length, 1, `captures: ${rows.map((r) => r.snapshot_id)}`);
    for (const child of children) await assertTraces(child, source.sandboxId);
    assert.equal((await source.commands.run("echo source")).stdout, "source\n");
  });
});
