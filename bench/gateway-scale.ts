// `npm run bench:gateway-scale`: one gateway at internet scale, in simulation (issue 42, 5).
// A real PostgreSQL, WARREN_TEST_SCALE_NODES simulated nodes (the real node server — API,
// orchestrator, PostgreSQL catalog, cluster membership and port — on in-memory VMM, slot and
// guest fakes: bench/lib/simulated-nodes.ts) and the real gateway in its own process.
// WARREN_TEST_SCALE_CLIENTS clients at once make WARREN_TEST_SCALE_CREATES sandboxes through the
// gateway, spread over WARREN_TEST_SCALE_TEAMS teams; then every id is checked distinct and
// tracked in the catalog, a sample routed (through the gateway and straight to the node the
// catalog names; another team's key gets 404), each team's list counted, every sandbox killed
// through the gateway, and the lists and catalog checked empty.
//
// Reported: creates/s through the gateway; what the gateway adds to a call (the same call
// straight to a node vs through it, one at a time on an idle cluster); the gateway's RSS
// with every sandbox live; the CPU each process spent per create (gateway, nodes,
// PostgreSQL, the clients), which says what bound the rate on this machine's shared cores
// and what the gateway alone would sustain per core.
import { Agent, request } from "node:http";
import { cpus } from "node:os";
import pg from "pg";
import { cpuMsOf, descendants, sampleProcess } from "./lib/processes.js";
import { report, summarize } from "./lib/report.js";
import { type SimulatedCluster, startSimulatedCluster } from "./lib/simulated-cluster.js";

const CREATES = Number(process.env.WARREN_TEST_SCALE_CREATES ?? 100_000);
const CLIENTS = Number(process.env.WARREN_TEST_SCALE_CLIENTS ?? 1_000);
const NODES = Number(process.env.WARREN_TEST_SCALE_NODES ?? 20);
const NODES_PER_PROCESS = Number(process.env.WARREN_TEST_SCALE_NODES_PER_PROCESS ?? 5);
const TEAMS = Number(process.env.WARREN_TEST_SCALE_TEAMS ?? 4);
/** Calls of each kind, one at a time, straight and through the gateway (added latency). */
const PROBES = Number(process.env.WARREN_TEST_SCALE_PROBES ?? 500);
/** Sandboxes whose routing is checked call by call (all are checked in the catalog). */
const ROUTE_SAMPLE = Number(process.env.WARREN_TEST_SCALE_ROUTE_SAMPLE ?? 2_000);

const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS + 16 });

interface Answer {
  readonly status: number;
  readonly body: string;
  readonly ms: number;
}

/** One HTTP call on the bench's keep-alive pool: node:http, lighter than fetch per call. */
function call(base: string, method: string, path: string, key: string, body?: unknown) {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  const started = performance.now();
  return new Promise<Answer>((resolve, reject) => {
    const url = new URL(path, base);
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname + url.search,
        method,
        agent,
        headers: {
          "x-api-key": key,
          ...(payload !== undefined && {
            "content-type": "application/json",
            "content-length": Buffer.byteLength(payload),
          }),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("end", () =>
          resolve({
            status: res.statusCode ?? 0,
            body: Buffer.concat(chunks).toString("utf8"),
            ms: performance.now() - started,
          }),
        );
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(payload);
  });
}

const CREATE_BODY = { templateID: "base", timeout: 7200 };

function sandboxIdOf(answer: Answer, what: string): string {
  if (answer.status !== 201) throw new Error(`${what}: ${answer.status} ${answer.body}`);
  return (JSON.parse(answer.body) as { sandboxID: string }).sandboxID;
}

/** Runs `count` tasks with `width` at once, in order of their index. */
async function inParallel(count: number, width: number, task: (i: number) => Promise<void>) {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, count) }, async () => {
      for (let i = next++; i < count; i = next++) await task(i);
    }),
  );
}

/** The same calls straight to one node and through the gateway, one at a time, alternating. */
async function addedLatency(cluster: SimulatedCluster) {
  const nodeUrl = [...cluster.nodes.values()][0];
  const key = [...cluster.teams.values()][0];
  if (!nodeUrl || !key) throw new Error("no node or team");
  const gw = cluster.gatewayUrl;
  const created: string[] = [];
  const samples = { createDirect: [], createGateway: [], getDirect: [], getGateway: [] } as Record<
    "createDirect" | "createGateway" | "getDirect" | "getGateway",
    number[]
  >;
  for (let i = 0; i < PROBES + 20; i++) {
    const direct = await call(nodeUrl, "POST", "/sandboxes", key, CREATE_BODY);
    const viaGateway = await call(gw, "POST", "/sandboxes", key, CREATE_BODY);
    const id = sandboxIdOf(direct, "create on the node");
    created.push(id, sandboxIdOf(viaGateway, "create through the gateway"));
    const getDirect = await call(nodeUrl, "GET", `/sandboxes/${id}`, key);
    const getGateway = await call(gw, "GET", `/sandboxes/${id}`, key);
    if (getDirect.status !== 200 || getGateway.status !== 200)
      throw new Error("GET sandbox failed");
    if (i < 20) continue; // warm-up: connections, JIT
    samples.createDirect.push(direct.ms);
    samples.createGateway.push(viaGateway.ms);
    samples.getDirect.push(getDirect.ms);
    samples.getGateway.push(getGateway.ms);
  }
  await inParallel(created.length, 64, async (i) => {
    const killed = await call(gw, "DELETE", `/sandboxes/${created[i]}`, key);
    if (killed.status !== 204) throw new Error(`kill: ${killed.status} ${killed.body}`);
  });
  return samples;
}

/** Where each process of the run spent CPU so far, ms. */
function cpuNow(cluster: SimulatedCluster) {
  const tree = descendants(process.pid);
  const nodePids = cluster.nodeProcesses.map((child) => child.pid ?? 0);
  return {
    gateway: cpuMsOf([cluster.gateway.pid ?? 0]),
    nodes: cpuMsOf(nodePids),
    postgres: cpuMsOf(tree.filter((p) => p.comm === "postgres").map((p) => p.pid)),
    clients: cpuMsOf([process.pid]),
    wallMs: performance.now(),
  };
}

type CpuSample = ReturnType<typeof cpuNow>;

/** CPU ms per operation of each, and each one's share of one core over the phase. */
function cpuPer(before: CpuSample, after: CpuSample, operations: number) {
  const wall = after.wallMs - before.wallMs;
  const out: Record<string, { msPerOp: number; cores: number }> = {};
  for (const role of ["gateway", "nodes", "postgres", "clients"] as const) {
    const spent = after[role] - before[role];
    out[role] = {
      msPerOp: Math.round((spent / operations) * 1000) / 1000,
      cores: Math.round((spent / wall) * 100) / 100,
    };
  }
  return out;
}

interface Created {
  readonly ids: string[];
  readonly teamOf: Map<string, string>;
  readonly latencies: number[];
  readonly statuses: Map<number, number>;
  readonly perSecond: number;
  /** Creates finished in each second of the run. */
  readonly timeline: number[];
}

/** CREATES creates through the gateway, CLIENTS at once, teams taking turns. */
async function createAll(cluster: SimulatedCluster): Promise<Created> {
  const teams = [...cluster.teams];
  const ids: string[] = [];
  const teamOf = new Map<string, string>();
  const latencies: number[] = [];
  const statuses = new Map<number, number>();
  const timeline: number[] = [];
  const started = performance.now();
  await inParallel(CREATES, CLIENTS, async (i) => {
    const [team, key] = teams[i % teams.length] ?? ["", ""];
    const answer = await call(cluster.gatewayUrl, "POST", "/sandboxes", key, CREATE_BODY);
    statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
    const second = Math.floor((performance.now() - started) / 1000);
    timeline[second] = (timeline[second] ?? 0) + 1;
    if (answer.status !== 201) return;
    const id = sandboxIdOf(answer, "create");
    ids.push(id);
    teamOf.set(id, team);
    latencies.push(answer.ms);
  });
  const seconds = (performance.now() - started) / 1000;
  const perSecond = Math.round((ids.length / seconds) * 10) / 10;
  return {
    ids,
    teamOf,
    latencies,
    statuses,
    perSecond,
    timeline: [...timeline].map((n) => n ?? 0),
  };
}

/** Every created sandbox is running in the catalog, on a node; sandboxes per node. */
async function checkCatalog(cluster: SimulatedCluster, created: Created) {
  const db = new pg.Client({ connectionString: cluster.databaseUrl });
  await db.connect();
  try {
    const { rows } = await db.query<{ id: string; node_id: string; team_id: string }>(
      "SELECT id, node_id, team_id FROM sandboxes WHERE state = 'running'",
    );
    const nodeOf = new Map(rows.map((row) => [row.id, row.node_id]));
    const missing = created.ids.filter((id) => !nodeOf.has(id));
    const wrongTeam = rows.filter((row) => created.teamOf.get(row.id) !== row.team_id);
    const perNode: Record<string, number> = {};
    for (const node of nodeOf.values()) perNode[node] = (perNode[node] ?? 0) + 1;
    return {
      nodeOf,
      missing: missing.length,
      extra: rows.length - created.ids.length,
      wrongTeam: wrongTeam.length,
      perNode,
    };
  } finally {
    await db.end();
  }
}

/** A sample routed: through the gateway (own key: 200; another team's: 404) and straight to its node. */
async function checkRoutes(
  cluster: SimulatedCluster,
  created: Created,
  nodeOf: Map<string, string>,
) {
  const step = Math.max(1, Math.floor(created.ids.length / ROUTE_SAMPLE));
  const sample = created.ids.filter((_, i) => i % step === 0);
  const keys = [...cluster.teams];
  let wrong = 0;
  await inParallel(sample.length, 64, async (i) => {
    const id = sample[i] ?? "";
    const team = created.teamOf.get(id) ?? "";
    const key = cluster.teams.get(team) ?? "";
    const other = keys.find(([t]) => t !== team)?.[1];
    const viaGateway = await call(cluster.gatewayUrl, "GET", `/sandboxes/${id}`, key);
    const nodeUrl = cluster.nodes.get(nodeOf.get(id) ?? "") ?? "";
    const direct = await call(nodeUrl, "GET", `/sandboxes/${id}`, key);
    const foreign = other && (await call(cluster.gatewayUrl, "GET", `/sandboxes/${id}`, other));
    const ok =
      viaGateway.status === 200 &&
      (JSON.parse(viaGateway.body) as { sandboxID?: string }).sandboxID === id &&
      direct.status === 200 &&
      (!foreign || foreign.status === 404);
    if (!ok) wrong += 1;
  });
  return { checked: sample.length, wrong };
}

/** Each team's list through the gateway (v1: every node's, merged), as counts. */
async function listCounts(cluster: SimulatedCluster): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const [team, key] of cluster.teams) {
    const listed = await call(cluster.gatewayUrl, "GET", "/sandboxes", key);
    if (listed.status !== 200) throw new Error(`list: ${listed.status} ${listed.body}`);
    counts[team] = (JSON.parse(listed.body) as unknown[]).length;
  }
  return counts;
}

async function killAll(cluster: SimulatedCluster, created: Created) {
  const statuses = new Map<number, number>();
  const started = performance.now();
  await inParallel(created.ids.length, CLIENTS, async (i) => {
    const id = created.ids[i] ?? "";
    const key = cluster.teams.get(created.teamOf.get(id) ?? "") ?? "";
    const answer = await call(cluster.gatewayUrl, "DELETE", `/sandboxes/${id}`, key);
    statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
  });
  const seconds = (performance.now() - started) / 1000;
  return {
    statuses: Object.fromEntries(statuses),
    perSecond: Math.round((created.ids.length / seconds) * 10) / 10,
  };
}

function expectedPerTeam(created: Created): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const team of created.teamOf.values()) counts[team] = (counts[team] ?? 0) + 1;
  return counts;
}

async function main(): Promise<void> {
  const setupStarted = performance.now();
  const cluster = await startSimulatedCluster({
    nodes: NODES,
    nodesPerProcess: NODES_PER_PROCESS,
    teams: TEAMS,
    maxSandboxesPerNode: Math.ceil((CREATES / NODES) * 2) + 2 * PROBES + 100,
  });
  try {
    const setupSeconds = Math.round((performance.now() - setupStarted) / 100) / 10;
    const idle = {
      gateway: sampleProcess(cluster.gateway.pid ?? 0),
      nodeProcesses: cluster.nodeProcesses.map((c) => sampleProcess(c.pid ?? 0).rssMiB),
    };
    const probes = await addedLatency(cluster);
    const before = cpuNow(cluster);
    const created = await createAll(cluster);
    const cpu = cpuPer(before, cpuNow(cluster), CREATES);
    const live = {
      gateway: sampleProcess(cluster.gateway.pid ?? 0),
      nodeProcesses: cluster.nodeProcesses.map((c) => sampleProcess(c.pid ?? 0).rssMiB),
    };
    const distinct = new Set(created.ids).size;
    const catalog = await checkCatalog(cluster, created);
    const routes = await checkRoutes(cluster, created, catalog.nodeOf);
    const expected = expectedPerTeam(created);
    const listed = await listCounts(cluster);
    const killed = await killAll(cluster, created);
    const listedAfter = await listCounts(cluster);
    const leftInCatalog = (await checkCatalog(cluster, { ...created, ids: [] })).extra;
    const p = (xs: number[]) => summarize("", "ms", xs);
    const added = (gw: number[], direct: number[]) => ({
      p50: Math.round((p(gw).p50 - p(direct).p50) * 100) / 100,
      p99: Math.round((p(gw).p99 - p(direct).p99) * 100) / 100,
    });
    const correct =
      created.ids.length === CREATES &&
      distinct === CREATES &&
      catalog.missing === 0 &&
      catalog.extra === 0 &&
      catalog.wrongTeam === 0 &&
      routes.wrong === 0 &&
      Object.entries(expected).every(([team, n]) => listed[team] === n) &&
      Object.keys(listed).length === Object.keys(expected).length &&
      killed.statuses[204] === CREATES &&
      Object.values(listedAfter).every((n) => n === 0) &&
      leftInCatalog === 0;
    report(
      "gateway-scale",
      [
        summarize("create, straight to a node (idle, one at a time)", "ms", probes.createDirect),
        summarize("create, through the gateway (idle, one at a time)", "ms", probes.createGateway),
        summarize("GET sandbox, straight to its node (idle)", "ms", probes.getDirect),
        summarize("GET sandbox, through the gateway (idle)", "ms", probes.getGateway),
        summarize(
          `create through the gateway, ${CLIENTS} clients at once`,
          "ms",
          created.latencies,
        ),
      ],
      {
        machine: { cpus: cpus().length },
        setup: {
          nodes: NODES,
          nodesPerProcess: NODES_PER_PROCESS,
          teams: TEAMS,
          clients: CLIENTS,
          creates: CREATES,
          setupSeconds,
        },
        createsPerSecond: created.perSecond,
        timeline: created.timeline,
        createStatuses: Object.fromEntries(created.statuses),
        addedMs: {
          create: added(probes.createGateway, probes.createDirect),
          get: added(probes.getGateway, probes.getDirect),
        },
        gatewayRssMiB: {
          idle: idle.gateway.rssMiB,
          live: live.gateway.rssMiB,
          peak: live.gateway.peakRssMiB,
        },
        nodeProcessRssMiB: { idle: idle.nodeProcesses, live: live.nodeProcesses },
        cpuPerCreate: cpu,
        gatewayCeilingPerCore: Math.round(1000 / (cpu.gateway?.msPerOp || Number.NaN)),
        checks: {
          distinct,
          catalog: {
            missing: catalog.missing,
            extra: catalog.extra,
            wrongTeam: catalog.wrongTeam,
            perNode: catalog.perNode,
          },
          routes,
          listed,
          expected,
          killed,
          listedAfter,
          leftInCatalog,
          correct,
        },
      },
    );
    if (!correct) process.exitCode = 1;
  } finally {
    agent.destroy();
    await cluster.stop();
  }
}

await main();
