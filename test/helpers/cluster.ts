/**
 * A Warren cluster on one machine for the e2e tier: a real PostgreSQL, node servers each in
 * a network namespace of its own (its own address, as a separate host would have; its own
 * data dir, network names, slot block and VMM uids) and the real gateway in front, all
 * started as the operator would (WARREN_DATABASE_URL, WARREN_API_KEYS, the bundles of
 * `npm start` and `npm run gateway`).
 *
 * Addresses come from this run's block (run-env.ts), a /16: node i's slots get the i-th /18,
 * the links between the host and the nodes the last /24, a /30 each (host .4i+1, node .4i+2).
 * Names start with the run's prefix, so an interrupted run's leftovers are removed with it.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { runCommand } from "../../src/network/index.js";
import { type PostgresOptions, startPostgres, type TestPostgres } from "./postgres.js";
import { RUN_VMM_UID_COUNT, runEnv, runVmmUidBase } from "./run-env.js";
import { S3RVER_CREDENTIALS, type S3TestServer, startS3Server } from "./s3-server.js";
import { startServer, type TestServer } from "./server.js";

const ROOT = join(import.meta.dirname, "..", "..");
const WRAPPER = join(import.meta.dirname, "in-netns.sh");
const NODE_PORT = 3000;

export interface ClusterNode {
  readonly id: string;
  readonly address: string;
  readonly url: string;
  readonly netns: string;
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

/** The run block's second and third octets' base, e.g. 10.205.0.0/16 → "10.205". */
function blockBase(): string {
  const [a, b] = runEnv().networkCidr.split(".");
  return `${a}.${b}`;
}

async function ip(...args: string[]): Promise<void> {
  await runCommand("ip", args);
}

export async function startCluster(options: ClusterOptions): Promise<TestCluster> {
  const run = runEnv();
  const base = blockBase();
  const apiKey = `e2b_${randomBytes(20).toString("hex")}`;
  const links: { host: string; node: string; netns: string; hostLink: string }[] = [];
  const cleanups: (() => Promise<void>)[] = [];
  const cleanup = async () => {
    for (const step of cleanups.splice(0).reverse()) await step().catch(() => {});
  };
  try {
    for (let i = 0; i < options.nodes; i++) {
      const netns = `${run.networkPrefix}-node${i}`;
      const hostLink = `${run.networkPrefix}h${i}`;
      const nodeLink = `${run.networkPrefix}g${i}`;
      const link = {
        host: `${base}.255.${4 * i + 1}`,
        node: `${base}.255.${4 * i + 2}`,
        netns,
        hostLink,
      };
      await ip("netns", "add", netns);
      cleanups.push(() => ip("netns", "del", netns));
      await ip("link", "add", hostLink, "type", "veth", "peer", "name", nodeLink);
      cleanups.push(() => ip("link", "del", hostLink));
      await ip("link", "set", nodeLink, "netns", netns);
      await ip("addr", "add", `${link.host}/30`, "dev", hostLink);
      await ip("link", "set", hostLink, "up");
      await ip("-n", netns, "addr", "add", `${link.node}/30`, "dev", nodeLink);
      await ip("-n", netns, "link", "set", nodeLink, "up");
      await ip("-n", netns, "link", "set", "lo", "up");
      links.push(link);
    }
    const pgOptions: PostgresOptions = {
      listen: links.map((l) => l.host),
      trust: [`${base}.255.0/24`],
    };
    const pg = await startPostgres(pgOptions);
    cleanups.push(() => pg.stop());
    const hostDatabaseUrl = await pg.createDatabase("warren_cluster");
    const dbPort = new URL(hostDatabaseUrl).port;
    const nodeDatabaseUrl = (host: string) => `postgres://warren@${host}:${dbPort}/warren_cluster`;

    const storeEnv: Record<string, string> = {};
    let s3: S3TestServer | undefined;
    const first = links[0];
    if (options.store === "s3" && first) {
      const server = await startS3Server(first.host);
      s3 = server;
      cleanups.push(() => server.close());
      for (const link of links.slice(1)) {
        await ip("-n", link.netns, "route", "add", `${first.host}/32`, "via", link.host);
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

    const uidsPerNode = Math.floor(RUN_VMM_UID_COUNT / options.nodes);
    const nodes: ClusterNode[] = links.map((link, i) => {
      const id = `node${i}`;
      // Letters after the run prefix: a node's names never read as the run's own slots.
      const prefix = `${run.networkPrefix}${"xyzw"[i] ?? "q"}`;
      return {
        id,
        address: link.node,
        url: `http://${link.node}:${NODE_PORT}`,
        netns: link.netns,
        env: {
          WARREN_HOME: join(run.dataDir, id),
          WARREN_IMAGES_DIR: run.imagesDir,
          WARREN_HOST: link.node,
          WARREN_PORT: String(NODE_PORT),
          WARREN_NETWORK_PREFIX: prefix,
          WARREN_NETWORK_CIDR: `${base}.${i * 64}.0/18`,
          WARREN_VMM_UID_BASE: String(runVmmUidBase() + i * uidsPerNode),
          WARREN_VMM_UID_COUNT: String(uidsPerNode),
          WARREN_DATABASE_URL: nodeDatabaseUrl(link.host),
          WARREN_NODE_ID: id,
          WARREN_API_KEYS: apiKey,
          WARREN_HEARTBEAT_MS: "500",
          ...storeEnv,
          ...options.nodeEnv,
        },
      };
    });
    const startNode = async (node: ClusterNode) => {
      await mkdir(node.env.WARREN_HOME as string, { recursive: true, mode: 0o711 });
      const stash = join(run.dataDir, `${node.id}-cgroup`);
      // The SDK keeps talking to the gateway, also when a node is restarted.
      node.server = await startServer(node.env, {
        wrap: [WRAPPER, node.netns, stash],
        sdkEnv: false,
      });
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
      databaseUrl: nodeDatabaseUrl(links[0]?.host ?? "127.0.0.1"),
      hostDatabaseUrl,
      apiKey,
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

async function freeLoopbackPort(): Promise<number> {
  const { createServer } = await import("node:net");
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (!address || typeof address === "string") throw new Error("no port");
  return address.port;
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
