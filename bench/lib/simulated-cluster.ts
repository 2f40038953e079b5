// A cluster for the gateway's scale bench, on this one machine: a real PostgreSQL (the test
// helper's), simulated node servers (bench/lib/simulated-nodes.ts: the real node server on
// in-memory machines), several to a process, and the real gateway (its bundle, or its source
// through tsx) in a process of its own, all with certificates from a cluster CA made for the
// run. Teams and their keys are made in the catalog, as `warren team` would.
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { PostgresCluster } from "../../src/catalog/index.js";
import { newApiKey } from "../../src/tenancy/index.js";
import { createClusterCa, issueClusterCertificate } from "../../src/tls/index.js";
import { freeLoopbackPort } from "../../test/helpers/free-port.js";
import { startPostgres, type TestPostgres } from "../../test/helpers/postgres.js";

const ROOT = join(import.meta.dirname, "..", "..");

export interface SimulatedCluster {
  readonly pg: TestPostgres;
  readonly databaseUrl: string;
  readonly gatewayUrl: string;
  readonly gateway: ChildProcess;
  /** Each node's id and plain port (API keys; what "straight to the node" calls). */
  readonly nodes: ReadonlyMap<string, string>;
  readonly nodeProcesses: readonly ChildProcess[];
  /** One API key per team, by team id. */
  readonly teams: ReadonlyMap<string, string>;
  readonly adminToken: string;
  stop(): Promise<void>;
}

export interface SimulatedClusterOptions {
  readonly nodes: number;
  readonly nodesPerProcess: number;
  readonly teams: number;
  /** Sandboxes each node admits (WARREN_MAX_SANDBOXES). */
  readonly maxSandboxesPerNode: number;
}

/** Settings of every simulated node: room for everything the bench creates, nothing slow. */
function nodeSettings(
  options: SimulatedClusterOptions,
  databaseUrl: string,
  adminToken: string,
): Record<string, string> {
  return {
    WARREN_DATABASE_URL: databaseUrl,
    WARREN_ADMIN_TOKEN: adminToken,
    WARREN_LOG_LEVEL: "warn",
    WARREN_LOG_FORMAT: "json",
    WARREN_MAX_SANDBOXES: String(options.maxSandboxesPerNode),
    // Sandbox counts, not guest CPUs or memory, bound a simulated node.
    WARREN_VCPU_OVERCOMMIT: "100000",
    WARREN_MEMORY_OVERCOMMIT: "10000",
    WARREN_TEMPLATE_MEMORY_MIB: "128",
    WARREN_MEMORY_RESERVE_MIB: "0",
    WARREN_DISK_RESERVE_MIB: "0",
    // A simulated VM starts in no time: no reason to queue starts behind two cores' worth.
    WARREN_MAX_CONCURRENT_STARTS: "1024",
    WARREN_METRICS_INTERVAL_MS: "0",
    WARREN_POOL_SIZE: "0",
    WARREN_POOL_MAX_PER_TEMPLATE: "0",
    WARREN_CODE_INTERPRETER: "off",
    WARREN_DASHBOARD: "off",
    WARREN_DEFAULT_TIMEOUT_MS: "7200000",
    WARREN_HEARTBEAT_MS: "1000",
  };
}

/** Starts one process of simulated nodes; resolves with each node's plain URL once all serve. */
async function startNodeProcess(
  nodes: readonly { id: string; dataDir: string; tlsDir: string }[],
  env: Record<string, string>,
): Promise<{ child: ChildProcess; urls: Map<string, string> }> {
  const child = spawn(
    process.execPath,
    ["--import", "tsx", join(ROOT, "bench", "lib", "simulated-nodes.ts")],
    {
      cwd: ROOT,
      env: { ...process.env, ...env, WARREN_BENCH_SIM_NODES: JSON.stringify(nodes) },
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  const urls = new Map<string, string>();
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
  await new Promise<void>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`simulated nodes exited (${code})`)));
    lines.on("line", (line) => {
      const { id, url } = JSON.parse(line) as { id: string; url: string };
      urls.set(id, url);
      if (urls.size === nodes.length) resolve();
    });
  });
  child.removeAllListeners("exit");
  return { child, urls };
}

/** The gateway as `npm run gateway` runs it (its bundle when built, else its source). */
function startGatewayProcess(env: Record<string, string>): ChildProcess {
  const bundle = join(ROOT, "dist", "gateway", "main.mjs");
  const args = existsSync(bundle)
    ? [bundle]
    : ["--import", "tsx", join(ROOT, "src", "gateway", "main.ts")];
  return spawn(process.execPath, args, {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ["ignore", "inherit", "inherit"],
  });
}

async function makeTeams(databaseUrl: string, count: number): Promise<Map<string, string>> {
  const catalog = await PostgresCluster.open({ connectionString: databaseUrl });
  const keys = new Map<string, string>();
  try {
    for (let i = 0; i < count; i++) {
      const id = `team${i}`;
      await catalog.teams.putTeam({
        id,
        name: id,
        createdAt: new Date().toISOString(),
        limits: {},
      });
      const { row, key } = newApiKey(id, "bench");
      await catalog.teams.insertApiKey(row);
      keys.set(id, key);
    }
  } finally {
    await catalog.close();
  }
  return keys;
}

async function waitForNodes(url: string, adminToken: string, nodes: number): Promise<void> {
  const deadline = Date.now() + 120_000;
  for (;;) {
    const health = await fetch(`${url}/health`, { headers: { "x-admin-token": adminToken } })
      .then((res) => res.json() as Promise<{ up?: number }>)
      .catch(() => ({ up: 0 }));
    if (health.up === nodes) return;
    if (Date.now() > deadline) throw new Error(`${health.up ?? 0} of ${nodes} nodes up`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

export async function startSimulatedCluster(
  options: SimulatedClusterOptions,
): Promise<SimulatedCluster> {
  const work = await mkdtemp(join(tmpdir(), "warren-gateway-scale-"));
  const children: ChildProcess[] = [];
  // Each node holds a pool of ten per catalog; PostgreSQL's own default is a hundred.
  const pg = await startPostgres({
    settings: {
      max_connections: String(options.nodes * 22 + 40),
      shared_buffers: "256MB",
    },
  });
  const stop = async () => {
    for (const child of children) child.kill("SIGTERM");
    await Promise.all(
      children.map((child) =>
        child.exitCode === null && child.signalCode === null
          ? new Promise((resolve) => child.once("exit", resolve))
          : undefined,
      ),
    );
    await pg.stop();
    await rm(work, { recursive: true, force: true });
  };
  try {
    const databaseUrl = await pg.createDatabase("warren_scale");
    const teams = await makeTeams(databaseUrl, options.teams);
    const adminToken = randomBytes(24).toString("hex");
    const caDir = join(work, "ca");
    await createClusterCa(caDir);
    const issue = async (role: "node" | "gateway", name: string) => {
      const outDir = join(work, "tls", `${role}-${name}`);
      await issueClusterCertificate({ caDir, outDir, identity: { role, name } });
      return outDir;
    };
    const specs = [];
    for (let i = 0; i < options.nodes; i++) {
      const id = `node${String(i).padStart(2, "0")}`;
      const dataDir = join(work, "nodes", id);
      await mkdir(dataDir, { recursive: true });
      specs.push({ id, dataDir, tlsDir: await issue("node", id) });
    }
    const env = nodeSettings(options, databaseUrl, adminToken);
    const nodes = new Map<string, string>();
    const started = [];
    for (let i = 0; i < specs.length; i += options.nodesPerProcess) {
      started.push(startNodeProcess(specs.slice(i, i + options.nodesPerProcess), env));
    }
    for (const { child, urls } of await Promise.all(started)) {
      children.push(child);
      for (const [id, url] of urls) nodes.set(id, url);
    }
    const port = await freeLoopbackPort();
    const gateway = startGatewayProcess({
      WARREN_DATABASE_URL: databaseUrl,
      WARREN_ADMIN_TOKEN: adminToken,
      // Required by the gateway; no client uses it (each team has its key in the catalog).
      WARREN_API_KEYS: `e2b_${randomBytes(20).toString("hex")}`,
      WARREN_CLUSTER_TLS_DIR: await issue("gateway", "gateway"),
      WARREN_HOST: "127.0.0.1",
      WARREN_PORT: String(port),
      WARREN_LOG_LEVEL: "warn",
      WARREN_LOG_FORMAT: "json",
      // Two shared cores may starve a node's heartbeat for seconds: a node marked down
      // would have its sandboxes reported lost, which is not what is measured here.
      WARREN_NODE_DOWN_AFTER_MS: "300000",
    });
    children.push(gateway);
    const gatewayUrl = `http://127.0.0.1:${port}`;
    await waitForNodes(gatewayUrl, adminToken, options.nodes);
    return {
      pg,
      databaseUrl,
      gatewayUrl,
      gateway,
      nodes,
      nodeProcesses: children.filter((child) => child !== gateway),
      teams,
      adminToken,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
