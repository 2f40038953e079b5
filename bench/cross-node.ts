// `npm run bench:cross-node`: resuming a paused sandbox on another node (the gateway moves it
// off its draining node; the new node fetches its snapshot from the shared store) vs on its
// own node, on a real cluster of two node servers (real VMs, each in its own network
// namespace), PostgreSQL and a shared store (WARREN_TEST_CLUSTER_STORE: s3, the default, an
// s3rver the bench starts; or dir), through the gateway with the e2b SDK.
//
// Each round: a fresh sandbox, a command, pause, wait until its snapshot is published, then
// Sandbox.connect timed. Rounds alternate same-node and cross-node. The first cross-node
// resume onto a node also fetches the other node's base template ("cold"); later ones fetch
// the pause layer only.
import { Sandbox } from "e2b";
import pg from "pg";
import { startCluster } from "../test/helpers/cluster.js";
import { waitFor } from "../test/helpers/server.js";
import { report, summarize } from "./lib/report.js";

const ROUNDS = Number(process.env.WARREN_TEST_CROSS_NODE_ROUNDS ?? 12);
const STORE = process.env.WARREN_TEST_CLUSTER_STORE === "dir" ? "dir" : "s3";

const cluster = await startCluster({
  nodes: 2,
  store: STORE,
  nodeEnv: { WARREN_POOL_SIZE: "0", WARREN_POOL_MAX_PER_TEMPLATE: "0" },
});
const db = new pg.Client({ connectionString: cluster.hostDatabaseUrl });
await db.connect();

/** A gateway route of the admin's (draining a node needs the admin token). */
async function gateway(method: string, path: string): Promise<void> {
  const res = await fetch(`${cluster.gateway.url}${path}`, {
    method,
    headers: { "x-admin-token": cluster.adminToken },
  });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
}

async function where(sandboxId: string) {
  const { rows } = await db.query<{
    node_id: string;
    published_at: Date | null;
    bytes: string | null;
  }>(
    `SELECT s.node_id, p.published_at,
       (SELECT sum((f->>'bytes')::bigint) FROM jsonb_array_elements(p.files) f) AS bytes
     FROM sandboxes s LEFT JOIN snapshots p ON p.id = s.snapshot_id WHERE s.id = $1`,
    [sandboxId],
  );
  const row = rows[0];
  if (!row) throw new Error(`no sandbox ${sandboxId}`);
  return { node: row.node_id, published: row.published_at !== null, bytes: Number(row.bytes) };
}

const same: number[] = [];
const cross: number[] = [];
const cold: number[] = [];
const publish: number[] = [];
const pauseBytes: number[] = [];
const fetchedBase = new Set<string>();
try {
  for (let round = 0; round < ROUNDS; round++) {
    const sandbox = await Sandbox.create();
    await sandbox.commands.run("head -c 8M /dev/urandom > /tmp/blob && echo ok");
    const t0 = performance.now();
    await sandbox.pause();
    await waitFor("published", async () => (await where(sandbox.sandboxId)).published, 120_000);
    publish.push(performance.now() - t0);
    const before = await where(sandbox.sandboxId);
    pauseBytes.push(before.bytes);
    const moving = round % 2 === 1;
    if (moving) await gateway("POST", `/nodes/${before.node}/drain`);
    const started = performance.now();
    await Sandbox.connect(sandbox.sandboxId);
    const ms = performance.now() - started;
    const after = await where(sandbox.sandboxId);
    if (moving) {
      await gateway("POST", `/nodes/${before.node}/undrain`);
      if (after.node === before.node) throw new Error("the cross-node resume stayed on its node");
      if (fetchedBase.has(after.node)) cross.push(ms);
      else cold.push(ms);
      fetchedBase.add(after.node);
    } else {
      if (after.node !== before.node) throw new Error("the same-node resume moved");
      same.push(ms);
    }
    if ((await sandbox.commands.run("wc -c < /tmp/blob")).stdout.trim() !== "8388608")
      throw new Error("the sandbox lost its file");
    await sandbox.kill();
    console.error(
      `round ${round + 1}/${ROUNDS}: ${moving ? "cross" : "same"} ${Math.round(ms)} ms`,
    );
  }
} finally {
  await db.end();
  await cluster.stop();
}

const p50 = (xs: number[]) => summarize("", "ms", xs).p50;
report(
  "cross-node",
  [
    summarize("resume, same node", "ms", same),
    summarize("resume, another node (pause layer fetched)", "ms", cross),
    summarize("resume, another node, first (base template fetched too)", "ms", cold),
    summarize("pause until published", "ms", publish),
    summarize(
      "pause snapshot size",
      "MiB",
      pauseBytes.map((b) => b / 2 ** 20),
    ),
  ],
  {
    store: STORE,
    rounds: ROUNDS,
    crossVsSameP50: Math.round((p50(cross) / p50(same)) * 100) / 100,
  },
);
