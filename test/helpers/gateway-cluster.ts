/**
 * A cluster on loopback for the gateway's tests: stand-in nodes, each the real node API
 * (createApi) over the in-memory sandbox service, sharing its ports with a stand-in sandbox
 * proxy (it answers who it is and what it got, streams on `/stream`, echoes after an
 * Upgrade), behind a real gateway reading an in-memory cluster catalog, where each node keeps
 * its sandboxes' rows as a real node's catalog would. As real nodes, each has a plain port
 * and a cluster port (the node server's own `listenCluster`: mutual TLS, gateways only), with
 * certificates from a cluster CA made for the run (`pki`); the gateway reaches them there.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Duplex } from "node:stream";
import { afterEach } from "node:test";
import { createApi } from "../../src/api/index.js";
import type { Catalog } from "../../src/catalog/index.js";
import { type Gateway, type GatewayOptions, startGateway } from "../../src/gateway/gateway.js";
import { isProxyRequest } from "../../src/gateway/routes.js";
import type { SandboxInfo } from "../../src/orchestrator/index.js";
import { StartQueue } from "../../src/orchestrator/start-queue.js";
import { fromControlChannel, listenCluster } from "../../src/server/cluster-listener.js";
import { silentLogger } from "../../src/shared/index.js";
import {
  type ClusterCredentials,
  type ClusterIdentity,
  createClusterCa,
  issueClusterCertificate,
  loadClusterCredentials,
} from "../../src/tls/index.js";
import { sandboxRow } from "../contracts/catalog.contract.js";
import { InMemoryCluster } from "../fakes/in-memory-cluster.js";
import { InMemorySandboxService } from "../fakes/in-memory-sandbox-service.js";
import { testAuth } from "./auth.js";

export const API_KEY = "e2b_0123456789abcdef";

export interface StandInNode {
  readonly id: string;
  /** Its cluster port, as registered: https, a gateway's certificate required. */
  readonly url: string;
  /** Its plain port (API keys and sandbox tokens only, as a node's WARREN_PORT). */
  readonly plainUrl: string;
  readonly service: InMemorySandboxService;
  /** Requests its proxy got, as `METHOD path`. */
  readonly proxied: string[];
  stop(): Promise<void>;
}

/** The run's cluster CA: certificates for the nodes, the gateway, and whatever a test needs. */
export interface TestPki {
  readonly caDir: string;
  issue(identity: ClusterIdentity): Promise<ClusterCredentials>;
}

export interface TestCluster {
  readonly gateway: Gateway;
  readonly cluster: InMemoryCluster;
  readonly nodes: StandInNode[];
  readonly pki: TestPki;
  /** Starts another gateway on the same cluster (they are stateless). */
  restartGateway(): Promise<Gateway>;
  /** Records a paused sandbox's snapshot as published: another node may then claim it. */
  publishPause(sandboxId: string): Promise<void>;
  call(
    method: string,
    path: string,
    init?: { body?: unknown; headers?: Record<string, string>; apiKey?: string | null },
  ): Promise<Response>;
  close(): Promise<void>;
}

/**
 * A test file's clusters: `cluster(options)` starts one, closed after the test that started
 * it (node:test's afterEach, registered here).
 */
export function useTestClusters(): (
  options: Parameters<typeof startTestCluster>[0],
) => Promise<TestCluster> {
  let running: TestCluster | undefined;
  afterEach(async () => {
    await running?.close();
    running = undefined;
  });
  return async (options) => {
    running = await startTestCluster(options);
    return running;
  };
}

/** What a create costs a stand-in node: `ms` each, `concurrent` at once (its cores). */
export interface CreateCost {
  readonly ms: number;
  readonly concurrent: number;
}

export async function startTestCluster(options: {
  nodes: number;
  maxSandboxes?: number;
  gateway?: Partial<GatewayOptions>;
  createCost?: CreateCost;
}): Promise<TestCluster> {
  const nodes: StandInNode[] = [];
  const cluster = new InMemoryCluster();
  const pki = await startPki();
  for (let i = 0; i < options.nodes; i++) {
    const id = `node${i}`;
    const credentials = await pki.issue({ role: "node", name: id });
    const node = await startStandInNode(id, credentials, cluster, options);
    recordSandboxes(node.service, cluster.catalog(node.id));
    nodes.push(node);
    // Room in vCPUs and memory for every sandbox it may hold: the count is what binds.
    const maxSandboxes = options.maxSandboxes ?? 100;
    await cluster.registerNode({
      id: node.id,
      url: node.url,
      capacity: { vcpus: 16 * maxSandboxes, memoryMiB: 16_384 * maxSandboxes, maxSandboxes },
    });
  }
  const gatewayCredentials = await pki.issue({ role: "gateway", name: "gateway" });
  const start = () =>
    startGateway({
      cluster,
      credentials: gatewayCredentials,
      authenticate: testAuth(() => new Set([API_KEY]), cluster.teams),
      host: "127.0.0.1",
      port: 0,
      refreshMs: 50,
      ...options.gateway,
    });
  // Nodes report their load as real ones do (the gateway's reservations end with a report).
  const heartbeats = setInterval(() => {
    for (const node of nodes) {
      const running = [...node.service.sandboxes.values()].filter((s) => s.state === "running");
      const current = cluster.nodes.get(node.id);
      if (!current || current.state === "down") continue;
      void cluster.heartbeat(node.id, {
        sandboxes: running.length,
        vcpusUsed: running.reduce((sum, s) => sum + s.cpuCount, 0),
        memoryMiBUsed: running.reduce((sum, s) => sum + s.memoryMiB, 0),
        warmTemplates: current.load?.warmTemplates ?? [],
        draining: false,
      });
    }
  }, 100);
  let gateway = await start();
  return {
    get gateway() {
      return gateway;
    },
    cluster,
    nodes,
    pki,
    async restartGateway() {
      await gateway.close();
      gateway = await start();
      return gateway;
    },
    async publishPause(sandboxId) {
      const at = (await cluster.locateSandbox(sandboxId))?.nodeId;
      if (at === undefined) throw new Error(`no sandbox ${sandboxId} in the cluster`);
      const catalog = cluster.catalog(at);
      const snapshotId = `pause-of-${sandboxId}`;
      await catalog.putSnapshot({
        id: snapshotId,
        dir: `/snapshots/${snapshotId}`,
        sandboxId,
        kind: "pause",
        names: [],
        imagesFingerprint: "stand-in",
        createdAt: new Date().toISOString(),
      });
      await catalog.updateSandbox(sandboxId, { snapshotId });
      await cluster.markPublished(snapshotId);
    },
    call(method, path, init = {}) {
      const apiKey = init.apiKey === undefined ? API_KEY : init.apiKey;
      return fetch(`${gateway.url}${path}`, {
        method,
        headers: {
          ...(apiKey === null ? {} : { "x-api-key": apiKey }),
          ...(init.body === undefined ? {} : { "content-type": "application/json" }),
          ...init.headers,
        },
        ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
      });
    },
    async close() {
      clearInterval(heartbeats);
      await gateway.close();
      for (const node of nodes) await node.stop();
      await pki.remove();
    },
  };
}

/** A cluster CA in a temporary directory, and certificates from it on demand. */
export async function startPki(): Promise<TestPki & { remove(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), "warren-cluster-pki-"));
  const caDir = join(dir, "ca");
  await createClusterCa(caDir);
  let issued = 0;
  return {
    caDir,
    async issue(identity) {
      const outDir = join(dir, `${identity.role}-${identity.name}-${++issued}`);
      await issueClusterCertificate({ caDir, outDir, identity });
      return loadClusterCredentials(outDir, identity.role, identity.name);
    },
    remove: () => rm(dir, { recursive: true, force: true }),
  };
}

async function startStandInNode(
  id: string,
  credentials: ClusterCredentials,
  { teams }: InMemoryCluster,
  { maxSandboxes, createCost }: { maxSandboxes?: number; createCost?: CreateCost },
): Promise<StandInNode> {
  const service = new InMemorySandboxService({ idPrefix: id, maxSandboxes });
  if (createCost) chargeCreates(service, createCost);
  const proxied: string[] = [];
  let server: Server | undefined;
  let handleApi: ((req: IncomingMessage, res: ServerResponse) => void) | undefined;
  const onRequest = (req: IncomingMessage, res: ServerResponse) => {
    if (isProxyRequest(req, undefined)) standInProxy(id, req, res, proxied);
    else handleApi?.(req, res);
  };
  const onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    proxied.push(`UPGRADE ${req.url}`);
    socket.write(
      "HTTP/1.1 101 Switching Protocols\r\nupgrade: echo\r\nconnection: upgrade\r\n\r\n",
    );
    if (head.length > 0) socket.write(head);
    socket.pipe(socket);
  };
  const api = createApi({
    service: () => service,
    authenticate: testAuth(() => new Set([API_KEY]), teams),
    internal: { service: () => service, fromControl: fromControlChannel },
    serverFactory: (handler) => {
      handleApi = handler;
      server = createServer(onRequest);
      server.on("upgrade", onUpgrade);
      return server;
    },
  });
  await api.listen({ host: "127.0.0.1", port: 0 });
  if (!server) throw new Error("the API did not make its server");
  const port = (server.address() as AddressInfo).port;
  const clusterPort = await listenCluster({
    credentials,
    host: "127.0.0.1",
    port: 0,
    onRequest,
    onUpgrade,
    onInternal: (req, res) => handleApi?.(req, res),
    logger: silentLogger,
  });
  return {
    id,
    url: clusterPort.url,
    plainUrl: `http://127.0.0.1:${port}`,
    service,
    proxied,
    async stop() {
      await clusterPort.close();
      server?.closeAllConnections();
      await api.close();
    },
  };
}

/**
 * Keeps a stand-in node's rows in the cluster catalog, as a real node's own catalog does: a
 * row for each sandbox it starts (created or forked), its state following pauses, resumes
 * and kills. A row another node claimed is that node's: this one's updates pass it by.
 */
function recordSandboxes(service: InMemorySandboxService, catalog: Catalog): void {
  const insert = (info: SandboxInfo) =>
    catalog.insertSandbox(
      sandboxRow({
        id: info.sandboxId,
        teamId: info.teamId,
        templateId: info.templateId,
        vcpus: info.cpuCount,
        memoryMiB: info.memoryMiB,
        startedAt: info.startedAt.toISOString(),
      }),
    );
  const create = service.create.bind(service);
  service.create = async (input) => {
    const sandbox = await create(input);
    await insert(sandbox);
    return sandbox;
  };
  const fork = service.fork.bind(service);
  service.fork = async (sandboxId, input) => {
    const results = await fork(sandboxId, input);
    for (const result of results) if ("sandbox" in result) await insert(result.sandbox);
    return results;
  };
  const pause = service.pause.bind(service);
  service.pause = async (sandboxId, options) => {
    await pause(sandboxId, options);
    await catalog.updateSandbox(sandboxId, { state: "paused" });
  };
  const connect = service.connect.bind(service);
  service.connect = async (sandboxId, timeoutMs, options) => {
    const connected = await connect(sandboxId, timeoutMs, options);
    await catalog.updateSandbox(sandboxId, { state: "running" });
    return connected;
  };
  const resume = service.resume.bind(service);
  service.resume = async (sandboxId, timeoutMs, autoPause) => {
    const resumed = await resume(sandboxId, timeoutMs, autoPause);
    await catalog.updateSandbox(sandboxId, { state: "running" });
    return resumed;
  };
  const kill = service.kill.bind(service);
  service.kill = async (sandboxId) => {
    await kill(sandboxId);
    await catalog.updateSandbox(sandboxId, { state: "killed" });
  };
}

/** Makes each create wait for one of `concurrent` permits, then `ms`, as VM starts would. */
function chargeCreates(service: InMemorySandboxService, cost: CreateCost): void {
  const create = service.create.bind(service);
  // Unbounded as a test's needs: the node's own bounds are not what these tests measure.
  const cores = new StartQueue(cost.concurrent, { maxQueued: 1_000_000, maxWaitMs: 600_000 });
  service.create = async (input) => {
    const permit = await cores.enter().turn();
    try {
      await new Promise((resolve) => setTimeout(resolve, cost.ms));
      return await create(input);
    } finally {
      permit.release();
    }
  };
}

function standInProxy(node: string, req: IncomingMessage, res: ServerResponse, seen: string[]) {
  seen.push(`${req.method} ${req.url}`);
  if (req.url === "/stream") {
    res.writeHead(200, { "content-type": "text/plain" });
    let n = 0;
    const timer = setInterval(() => {
      res.write(`chunk ${n}\n`);
      if (++n === 5) {
        clearInterval(timer);
        res.end();
      }
    }, 100);
    return;
  }
  if (req.url === "/hop") {
    // A head with hop-by-hop fields, one of them named by Connection only.
    // biome-ignore format: name/value pairs
    res.writeHead(200, [
      "Content-Type", "text/plain",
      "Connection", "keep-alive, X-Hop",
      "X-Hop", "1",
      "Proxy-Agent", "stand-in",
      "X-Kept", "yes",
    ]);
    res.end("hop");
    return;
  }
  if (req.url === "/big-head") {
    // Over Node's default 16 KiB, under the 64 KiB a node's proxy relays.
    res.writeHead(200, { "content-type": "text/plain", "x-big": "b".repeat(32 * 1024) });
    res.end("big");
    return;
  }
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    const body = JSON.stringify({
      node,
      host: req.headers.host,
      sandboxId: req.headers["e2b-sandbox-id"],
      path: req.url,
      body: Buffer.concat(chunks).toString("utf8"),
      headers: req.headers,
    });
    res.writeHead(200, { "content-type": "application/json" }).end(body);
  });
}
