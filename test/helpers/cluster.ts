/**
 * A Warren cluster on one machine for the e2e tier: a real PostgreSQL, node servers each in
 * a network namespace of its own (its own address, as a separate host would have; its own
 * data dir, network names, slot block and VMM uids) and the real gateway in front, all
 * started as the operator would (WARREN_DATABASE_URL, WARREN_API_KEYS, certificates from a
 * cluster CA made with `warren cluster` in the run's data dir, the bundles of `npm start`
 * and `npm run gateway`).
 *
 * Addresses come from this run's block (run-env.ts), a /16: node i's slots get the i-th /18,
 * the links between the host and the nodes the last /24, a /30 each (host .4i+1, node .4i+2).
 * Names start with the run's prefix, so an interrupted run's leftovers are removed with it.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { runCommand } from "../../src/network/index.js";
import { freeLoopbackPort } from "./free-port.js";
import {
  addNetnsHost,
  type NetnsHost,
  netnsServerEnv,
  runBlockBase,
  startServerIn,
} from "./netns-host.js";
import { type PostgresOptions, startPostgres, type TestPostgres } from "./postgres.js";
import { runEnv } from "./run-env.js";
import { S3RVER_CREDENTIALS, type S3TestServer, startS3Server } from "./s3-server.js";
import type { TestServer } from "./server.js";

const ROOT = join(import.meta.dirname, "..", "..");
const NODE_PORT = 3000;
const CLUSTER_PORT = 3443;

export interface ClusterNode {
  readonly id: string;
  readonly address: string;
  /** Its cluster port, as it registers: https, a gateway's certificate required. */
  readonly url: string;
  /** Its plain port (WARREN_PORT: API keys and sandbox tokens, no internal node API). */
  readonly plainUrl: string;
  /** Its network namespace and link (netns-host.ts). */
  readonly host: NetnsHost;
  /** Its running server (absent before the first start). */
  server?: TestServer;
  /** The settings it was started with (restart it with the same). */
  readonly env: Readonly<Record<string, string>>;
}

export interface TestGateway {
  readonly url: string;
  readonly process: ChildProcess;
  stop(): Promise<void>;
}

export interface TestCluster {
  readonly pg: TestPostgres;
  /** The cluster catalog, as nodes reach it. */
  readonly databaseUrl: string;
  /** The same database from the host (the test's own reads). */
  readonly hostDatabaseUrl: string;
  readonly apiKey: string;
  /** The admin token every node and gateway shares (WARREN_ADMIN_TOKEN: `/nodes`, drains). */
  readonly adminToken: string;
  /** The cluster CA's directory (ca.crt, ca.key): `warren cluster issue` more from it. */
  readonly caDir: string;
  readonly nodes: ClusterNode[];
  /** The S3 server of `store: "s3"`. */
  readonly s3?: S3TestServer;
  gateway: TestGateway;
  /** Starts the gateway again on the same port (the SDK's URLs stay valid). */
  restartGateway(): Promise<TestGateway>;
  startNode(node: ClusterNode): Promise<void>;
  stop(): Promise<void>;
}

export interface ClusterOptions {
  readonly nodes: number;
  /** Settings for every node server. */
  readonly nodeEnv?: Record<string, string>;
  /** Settings for the gateway. */
  readonly gatewayEnv?: Record<string, string>;
  /**
   * The nodes' shared snapshot store: an S3-compatible server the test starts (s3rver, on
   * the first link's host address, routed to from every node) or a directory of the run's.
   * None when absent.
   */
  readonly store?: "s3" | "dir";
}

async function ip(...args: string[]): Promise<void> {
  await runCommand("ip", args);
}

/** `warren cluster …`: the bundle of the `warren` command, as an operator runs it. */
function warrenCluster(...args: string[]): void {
  execFileSync(process.execPath, [join(ROOT, "dist", "cli", "warren.mjs"), "cluster", ...args], {
    stdio: ["ignore", "ignore", "inherit"],
  });
}

export async function startCluster(options: ClusterOptions): Promise<TestCluster> {
  const run = runEnv();
  const base = runBlockBase();
  const apiKey = `e2b_${randomBytes(20).toString("hex")}`;
  const adminToken = randomBytes(24).toString("hex");
  const hosts: NetnsHost[] = [];
  const cleanups: (() => Promise<void>)[] = [];
  const cleanup = async () => {
    for (const step of cleanups.splice(0).reverse()) await step().catch(() => {});
  };
  try {
    for (let i = 0; i < options.nodes; i++) {
      const host = await addNetnsHost(i);
      cleanups.push(() => host.remove());
      hosts.push(host);
    }
    const pgOptions: PostgresOptions = {
      listen: hosts.map((h) => h.hostAddress),
      trust: [`${base}.255.0/24`],
    };
    const pg = await startPostgres(pgOptions);
    cleanups.push(() => pg.stop());
    const hostDatabaseUrl = await pg.createDatabase("warren_cluster");
    const dbPort = new URL(hostDatabaseUrl).port;
    const nodeDatabaseUrl = (host: string) => `postgres://warren@${host}:${dbPort}/warren_cluster`;

    const storeEnv: Record<string, string> = {};
    let s3: S3TestServer | undefined;
    const first = hosts[0];
    if (options.store === "s3" && first) {
      const server = await startS3Server(first.hostAddress);
      s3 = server;
      cleanups.push(() => server.close());
      for (const host of hosts.slice(1)) {
        await ip(
          "-n",
          host.netns,
          "route",
          "add",
          `${first.hostAddress}/32`,
          "via",
          host.hostAddress,
        );
      }
      Object.assign(storeEnv, {
        WARREN_SHARED_STORE: `s3://${await server.createBucket()}/warren`,
        WARREN_S3_ENDPOINT: server.endpoint,
        WARREN_S3_REGION: server.region,
        AWS_ACCESS_KEY_ID: S3RVER_CREDENTIALS.accessKeyId,
        AWS_SECRET_ACCESS_KEY: S3RVER_CREDENTIALS.secretAccessKey,
      });
    } else if (options.store === "dir") {
      storeEnv.WARREN_SHARED_STORE = join(run.dataDir, "shared-store");
    }

    // The cluster CA, and each member's directory of certificates, as docs/cluster.md says.
    const pki = join(run.dataDir, "cluster-pki");
    const caDir = join(pki, "ca");
    warrenCluster("init-ca", caDir);
    const tlsDir = (name: string) => join(pki, name);
    warrenCluster("issue", caDir, "--gateway", "--out", tlsDir("gateway"));
    const nodes: ClusterNode[] = hosts.map((host, i) => {
      const id = `node${i}`;
      warrenCluster("issue", caDir, "--node", id, "--out", tlsDir(id));
      return {
        id,
        address: host.address,
        url: `https://${host.address}:${CLUSTER_PORT}`,
        plainUrl: `http://${host.address}:${NODE_PORT}`,
        host,
        env: {
          ...netnsServerEnv(host, options.nodes, id, NODE_PORT),
          WARREN_DATABASE_URL: nodeDatabaseUrl(host.hostAddress),
          WARREN_NODE_ID: id,
          WARREN_CLUSTER_TLS_DIR: tlsDir(id),
          WARREN_CLUSTER_HOST: host.address,
          WARREN_CLUSTER_PORT: String(CLUSTER_PORT),
          WARREN_API_KEYS: apiKey,
          WARREN_ADMIN_TOKEN: adminToken,
          WARREN_HEARTBEAT_MS: "500",
          ...storeEnv,
          ...options.nodeEnv,
        },
      };
    });
    const startNode = async (node: ClusterNode) => {
      // The SDK keeps talking to the gateway, also when a node is restarted.
      node.server = await startServerIn(node.host, node.env);
    };
    cleanups.push(async () => {
      for (const node of nodes) await node.server?.stop();
    });
    // One at a time: each builds its base template (a cold boot) on its first start.
    for (const node of nodes) await startNode(node);

    const gatewayPort = await freeLoopbackPort();
    const gatewayEnv = {
      WARREN_DATABASE_URL: hostDatabaseUrl,
      WARREN_API_KEYS: apiKey,
      WARREN_ADMIN_TOKEN: adminToken,
      WARREN_CLUSTER_TLS_DIR: tlsDir("gateway"),
      WARREN_HOST: "127.0.0.1",
      WARREN_PORT: String(gatewayPort),
      WARREN_NODE_DOWN_AFTER_MS: "3000",
      ...options.gatewayEnv,
    };
    let gateway = await startGateway(gatewayEnv);
    cleanups.push(() => cluster.gateway.stop());
    process.env.E2B_API_URL = gateway.url;
    process.env.E2B_SANDBOX_URL = gateway.url;
    process.env.E2B_API_KEY = apiKey;
    const cluster: TestCluster = {
      pg,
      databaseUrl: nodeDatabaseUrl(hosts[0]?.hostAddress ?? "127.0.0.1"),
      hostDatabaseUrl,
      apiKey,
      adminToken,
      caDir,
      nodes,
      s3,
      gateway,
      async restartGateway() {
        await gateway.stop();
        gateway = await startGateway(gatewayEnv);
        cluster.gateway = gateway;
        return gateway;
      },
      startNode,
      stop: cleanup,
    };
    return cluster;
  } catch (err) {
    await cleanup();
    throw err;
  }
}

/** The gateway bundle (`npm run gateway`), ready once it logs where it listens. */
async function startGateway(env: Record<string, string>): Promise<TestGateway> {
  const child = spawn(
    process.execPath,
    ["--enable-source-maps", join(ROOT, "dist", "gateway", "main.mjs")],
    {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  const orphanGuard = () => child.kill("SIGTERM");
  process.once("exit", orphanGuard);
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`gateway not listening in 30 s\n${stderr}`)),
      30_000,
    );
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on("line", (line) => {
      if (process.env.WARREN_TEST_SERVER_LOG) process.stderr.write(`gateway: ${line}\n`);
      try {
        const entry = JSON.parse(line) as { msg?: string; url?: string };
        if (entry.msg === "gateway.listening" && entry.url) {
          clearTimeout(timer);
          resolve(entry.url);
        }
      } catch {
        // Not a log line.
      }
    });
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`gateway exited before listening\n${stderr}`));
    });
  });
  return {
    url,
    process: child,
    async stop() {
      process.off("exit", orphanGuard);
      if (child.exitCode === null) child.kill("SIGTERM");
      await exited;
    },
  };
}
