// `npm run bench:gateway`: what the gateway adds and how placement scales, on simulated nodes
// (the real node API over the in-memory sandbox service, each create costing
// WARREN_TEST_GATEWAY_CREATE_MS on one of WARREN_TEST_GATEWAY_NODE_CORES permits, as VM starts on a
// node's cores would), behind the real gateway and an in-memory cluster catalog. No VMs:
// the figures are the gateway's own.
//
//  - overhead: GET /sandboxes/{id} straight to a node vs through the gateway (p50, p99);
//  - creates per second through the gateway with 1 node and with 3 (goal: near 3×), with
//    enough clients at once to keep every node's cores busy.
import { startTestCluster, type TestCluster } from "../test/helpers/gateway-cluster.js";
import { machine, measure, report, summarize } from "./lib/report.js";

const CREATE_MS = Number(process.env.WARREN_TEST_GATEWAY_CREATE_MS ?? 100);
const NODE_CORES = Number(process.env.WARREN_TEST_GATEWAY_NODE_CORES ?? 2);
const CALLS = Number(process.env.WARREN_TEST_GATEWAY_CALLS ?? 2000);
const CREATES = Number(process.env.WARREN_TEST_GATEWAY_CREATES ?? 300);
const KEY = { "x-api-key": "e2b_0123456789abcdef" };

async function get(url: string): Promise<void> {
  const res = await fetch(url, { headers: KEY });
  await res.arrayBuffer();
  if (res.status !== 200) throw new Error(`GET ${url}: ${res.status}`);
}

async function overhead() {
  const cluster = await startTestCluster({ nodes: 1 });
  try {
    const created = await cluster.call("POST", "/sandboxes", { body: { templateID: "base" } });
    const { sandboxID } = (await created.json()) as { sandboxID: string };
    const node = cluster.nodes[0];
    if (!node) throw new Error("no node");
    const direct = await measure(CALLS, () => get(`${node.plainUrl}/sandboxes/${sandboxID}`), 50);
    const viaGateway = await measure(
      CALLS,
      () => get(`${cluster.gateway.url}/sandboxes/${sandboxID}`),
      50,
    );
    return { direct, viaGateway };
  } finally {
    await cluster.close();
  }
}

/** Creates per second with `clients` creating at once until CREATES are done. */
async function createRate(nodes: number): Promise<{ perSecond: number; latencies: number[] }> {
  const cluster: TestCluster = await startTestCluster({
    nodes,
    maxSandboxes: CREATES,
    createCost: { ms: CREATE_MS, concurrent: NODE_CORES },
    gateway: { queueWaitMs: 60_000 },
  });
  try {
    const clients = nodes * NODE_CORES * 4;
    let left = CREATES;
    const latencies: number[] = [];
    const started = performance.now();
    await Promise.all(
      Array.from({ length: clients }, async () => {
        while (left > 0) {
          left -= 1;
          const t0 = performance.now();
          const res = await cluster.call("POST", "/sandboxes", { body: { templateID: "base" } });
          await res.arrayBuffer();
          if (res.status !== 201) throw new Error(`create: ${res.status}`);
          latencies.push(performance.now() - t0);
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    return { perSecond: Math.round((CREATES / seconds) * 10) / 10, latencies };
  } finally {
    await cluster.close();
  }
}

const { direct, viaGateway } = await overhead();
const one = await createRate(1);
const three = await createRate(3);
const p50 = (xs: number[]) => summarize("", "ms", xs).p50;
report(
  "gateway",
  [
    summarize("GET sandbox, straight to the node", "ms", direct),
    summarize("GET sandbox, through the gateway", "ms", viaGateway),
    summarize("create through the gateway, 1 node", "ms", one.latencies),
    summarize("create through the gateway, 3 nodes", "ms", three.latencies),
  ],
  {
    machine: machine(),
    simulatedNode: { createMs: CREATE_MS, cores: NODE_CORES },
    overheadP50Ms: Math.round((p50(viaGateway) - p50(direct)) * 100) / 100,
    createsPerSecond: { oneNode: one.perSecond, threeNodes: three.perSecond },
    scaling3v1: Math.round((three.perSecond / one.perSecond) * 100) / 100,
    idealPerNode: Math.round((NODE_CORES * 1000) / CREATE_MS),
  },
);
