// `npm run bench:burst`: a burst far larger than the node, and the same through the gateway
// over three nodes. WARREN_TEST_BURST creates (default 1 000) sent at once; each gets a
// sandbox that answers its first command or a 429 with a Retry-After and a reason
// (test/helpers/burst.ts). Beside it, in the same run, the sequential rate: creates one after
// another, each until its first command, the sandboxes held as the burst's are. Reported:
// admitted, refused by reason, errors (must be 0), admitted time to first command p50/p99
// and their ratio (≤ 3: no starvation), how long refusals took, sandboxes answering per
// second during the burst vs sequentially (≥ 0.9×), the health check's worst latency during
// the burst, and what was left after the kills (nothing).
//
// WARREN_TEST_BURST_GATEWAY=0 skips the cluster part, WARREN_TEST_BURST_ONE_NODE=0 the one-node
// part; WARREN_TEST_BURST_NODE_ROOM sizes each
// cluster node (WARREN_MAX_SANDBOXES, default 40: three nodes on one 2-core machine).
import { Sandbox } from "e2b";
import {
  type BurstOptions,
  killBurst,
  runBurst,
  summarizeBurst,
  watchHealth,
} from "../test/helpers/burst.js";
import { startCluster } from "../test/helpers/cluster.js";
import { leakCheck, vmLeftovers } from "../test/helpers/leak-check.js";
import { listedSandboxes } from "../test/helpers/load.js";
import { startServer } from "../test/helpers/server.js";
import { poolRefilled } from "./lib/pool.js";
import { machine, report, summarize } from "./lib/report.js";

const BURST = Number(process.env.WARREN_TEST_BURST ?? 1000);
const SEQUENTIAL = Number(process.env.WARREN_TEST_BURST_SEQUENTIAL ?? 20);
const GATEWAY = process.env.WARREN_TEST_BURST_GATEWAY !== "0";
const ONE_NODE = process.env.WARREN_TEST_BURST_ONE_NODE !== "0";
const NODE_ROOM = process.env.WARREN_TEST_BURST_NODE_ROOM ?? "40";

/** Creates one after another, each until its first command; the sandboxes are kept. */
async function sequentialRate(api: BurstOptions): Promise<{ perSecond: number; ids: string[] }> {
  const ids: string[] = [];
  const started = performance.now();
  for (let i = 0; i < SEQUENTIAL; i++) {
    const sandbox = await Sandbox.create({ apiUrl: api.apiUrl, apiKey: api.apiKey });
    await sandbox.commands.run("true");
    ids.push(sandbox.sandboxId);
  }
  const seconds = (performance.now() - started) / 1000;
  return { perSecond: Math.round((SEQUENTIAL / seconds) * 10) / 10, ids };
}

async function kill(api: BurstOptions, ids: readonly string[]): Promise<void> {
  // Sandbox.kill takes its URL from E2B_API_URL, which the server and cluster helpers set.
  for (const id of ids) await Sandbox.kill(id, { apiKey: api.apiKey });
}

/** Sequential rate, then the burst, then kills: one API's figures. */
async function measure(label: string, api: BurstOptions, healthUrl: string) {
  const sequential = await sequentialRate(api);
  await kill(api, sequential.ids);
  process.stderr.write(`burst: ${label}: sequential ${sequential.perSecond}/s; bursting\n`);
  const burst = runBurst(api);
  const [result, health] = await Promise.all([burst, watchHealth(healthUrl, burst)]);
  // -1: a health check failed during the burst.
  const healthWorstMs = health.failed > 0 ? -1 : health.worstMs;
  const summary = summarizeBurst(result);
  await killBurst(api, result);
  const ratio = Math.round((summary.answeringPerSecond / sequential.perSecond) * 100) / 100;
  process.stderr.write(`burst: ${label}: ${JSON.stringify(summary)}\n`);
  const firsts = result.answers.flatMap((a) => (a.firstCommandMs ? [a.firstCommandMs] : []));
  return {
    row: summarize(`${label}: admitted create → first command`, "ms", firsts),
    figures: { ...summary, sequentialPerSecond: sequential.perSecond, ratio, healthWorstMs },
  };
}

async function oneNode() {
  const server = await startServer();
  try {
    await poolRefilled(server, 2);
    const api = { creates: BURST, apiUrl: server.url, apiKey: server.apiKey };
    const measured = await measure("one node", api, server.url);
    const listed = await listedSandboxes();
    return { ...measured, listedAfter: listed.length };
  } finally {
    await server.stop();
    const leftovers = [...(await vmLeftovers(`${server.dataDir}/run`)), ...(await leakCheck())];
    if (leftovers.length > 0) process.stderr.write(`burst: left behind: ${leftovers.join(", ")}\n`);
  }
}

async function throughGateway() {
  const cluster = await startCluster({
    nodes: 3,
    nodeEnv: { WARREN_MAX_SANDBOXES: NODE_ROOM },
  });
  try {
    const api = { creates: BURST, apiUrl: cluster.gateway.url, apiKey: cluster.apiKey };
    return await measure("gateway, 3 nodes", api, cluster.gateway.url);
  } finally {
    await cluster.stop();
  }
}

const node = ONE_NODE ? await oneNode() : undefined;
const gateway = GATEWAY ? await throughGateway() : undefined;
report(
  "burst",
  [node?.row, gateway?.row].filter((row) => row !== undefined),
  {
    machine: machine(),
    creates: BURST,
    sequentialCreates: SEQUENTIAL,
    ...(node && { oneNode: { ...node.figures, listedAfter: node.listedAfter } }),
    ...(gateway && { gateway: { ...gateway.figures, nodeRoom: Number(NODE_ROOM) } }),
  },
);
const failed = [node?.figures, gateway?.figures].some((f) => f && f.errors.length > 0);
if (failed || (node?.listedAfter ?? 0) > 0) process.exit(1);
