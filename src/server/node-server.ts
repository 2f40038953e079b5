import { writeFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { dirname, join } from "node:path";
import type { Duplex } from "node:stream";
import { fileURLToPath } from "node:url";
import pino, { type Logger } from "pino";
import { createApi } from "../api/index.js";
import { registryImages, TemplateBuilds } from "../builds/index.js";
import { type Catalog, PostgresCatalog, PostgresCluster, SqliteCatalog } from "../catalog/index.js";
import { ensureHostSetup } from "../host-setup/index.js";
import { NetnsSlotPool, slotNamesFor } from "../network/index.js";
import {
  EnvdGuestAgent,
  ensureLayout,
  Orchestrator,
  type ServerStatus,
  stateLayout,
} from "../orchestrator/index.js";
import { SandboxProxy } from "../proxy/index.js";
import { apiError, sendError } from "../relay/index.js";
import { authenticate } from "../shared/api-key-auth.js";
import { type Config, hostResources } from "../shared/config.js";
import { WarrenError } from "../shared/index.js";
import { openSharedStore, type SharedStore } from "../store/index.js";
import {
  chooseAccelerator,
  enableKsm,
  Qcow2DiskChains,
  QemuDriver,
  qemuVersion,
  startVmmWatchdog,
  VmCgroups,
  VmmIdentities,
} from "../vmm/qemu/index.js";
import { LiveApiKeys, loadApiKeys } from "./api-keys.js";
import { type Membership, startMembership } from "./cluster-membership.js";
import { dashboardFiles } from "./dashboard-files.js";
import { type KilledPurge, startKilledPurge } from "./killed-purge.js";
import { LateBound } from "./late-bound.js";
import { NodeMetrics } from "./prometheus.js";
import { listenTls, type TlsListener } from "./tls-listener.js";

/** The dashboard's built files (`npm run build`): from the bundle in dist/server or from source. */
const DASHBOARD_DIR = fileURLToPath(new URL("../../dist/dashboard", import.meta.url));

export interface NodeServer {
  /** Where it listens, e.g. http://127.0.0.1:3000. */
  readonly url: string;
  /** The keys accepted now (the key file is re-read when it changes). */
  readonly apiKeys: ReadonlySet<string>;
  /** Settles when the orchestrator is ready (or rejects when starting failed). */
  readonly ready: Promise<void>;
  readonly logger: Logger;
  close(): Promise<void>;
}

/**
 * The composition root: listens at once (API answers 503 while starting), then sets the host
 * up, chooses the accelerator, opens the catalog, builds the driver, slots, orchestrator and
 * proxy, and binds them. API and sandbox proxy share one port: a request carrying sandbox
 * routing (E2b-Sandbox-Id header or a `<port>-<id>.` Host) goes to the proxy.
 */
export async function startNodeServer(
  config: Readonly<Config>,
  logger?: Logger,
): Promise<NodeServer> {
  const root = logger ?? pino({ level: config.logLevel, base: undefined });
  const log = root.child({ component: "server" });
  const layout = stateLayout(config.dataDir);
  await ensureLayout(layout);
  const loaded = await loadApiKeys(layout.secretsDir, config.apiKeys);
  if (loaded.generated) {
    // Printed once, on the start that created it; afterwards it is only in the file.
    process.stderr.write(`\nWarren API key (stored in ${loaded.file}):\n  ${loaded.generated}\n\n`);
  }
  // Edits to the key file apply without a restart: removing a key revokes it.
  const apiKeys = new LiveApiKeys(loaded, config.apiKeys, { logger: log });

  let status: ServerStatus = { phase: "starting", message: "setting the host up" };
  const late = new LateBound(() => status);
  const proxy = new SandboxProxy({
    router: late,
    domain: config.domain,
    idleTimeoutMs: config.proxyIdleTimeoutMs,
    headTimeoutMs: config.proxyHeadTimeoutMs,
    logger: root.child({ component: "proxy" }),
  });
  let http: Server | undefined;
  let handleApi: ((req: IncomingMessage, res: ServerResponse) => void) | undefined;
  let orchestrator: Orchestrator | undefined;
  const metrics = new NodeMetrics(() => orchestrator?.stats());
  const dashboard = config.dashboard === "on" ? dashboardFiles(DASHBOARD_DIR) : undefined;
  // One port for all: a request with sandbox routing goes to the proxy, a scrape to the
  // metrics, the dashboard's files to it, the rest to the API.
  const onRequest = (req: IncomingMessage, res: ServerResponse) => {
    if (proxy.matches(req)) proxy.handleRequest(req, res);
    else if (isScrape(req)) serveMetrics(req, res, metrics, config, apiKeys.keys);
    else if (dashboard?.matches(req)) dashboard.serve(req, res).catch(() => res.destroy());
    else handleApi?.(req, res);
  };
  const onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    if (proxy.matches(req)) proxy.handleUpgrade(req, socket, head);
    else socket.destroy();
  };
  let builds: TemplateBuilds | undefined;
  let clusterKey: string | undefined;
  const api = createApi({
    service: late,
    builds: () => builds,
    apiKeys: () => apiKeys.keys,
    domain: config.domain ?? null,
    defaultTimeoutMs: config.defaultTimeoutMs,
    maxTimeoutMs: config.maxTimeoutMs,
    logger: root.child({ component: "api" }),
    onAnswered: (status, reason) => metrics.apiAnswered(status, reason),
    ...(config.databaseUrl ? { internal: { service: late, clusterKey: () => clusterKey } } : {}),
    serverFactory: (handler) => {
      handleApi = handler;
      http = createServer(onRequest);
      http.on("upgrade", onUpgrade);
      return http;
    },
  });
  await api.listen({ host: config.host, port: config.port });
  const address = http?.address() as AddressInfo;
  const url = `http://${config.host}:${address.port}`;
  let tls: TlsListener | undefined;
  try {
    tls = config.domain ? await listenTls(config, onRequest, onUpgrade, log) : undefined;
  } catch (err) {
    await api.close();
    throw err;
  }
  log.info({ url, dataDir: config.dataDir }, "server.listening");

  let watchdog: ReturnType<typeof startVmmWatchdog> | undefined;
  let killedPurge: KilledPurge | undefined;
  let cluster: PostgresCluster | undefined;
  let store: SharedStore | undefined;
  let membership: Membership | undefined;
  const ready = (async () => {
    if (config.sharedStore && !config.databaseUrl) {
      throw new WarrenError(
        "invalid_argument",
        "WARREN_SHARED_STORE is a cluster setting: set WARREN_DATABASE_URL too, or unset it",
      );
    }
    const images = await ensureHostSetup({ dataDir: config.dataDir, imagesDir: config.imagesDir });
    status = { phase: "starting", message: "choosing the accelerator" };
    const version = await qemuVersion();
    const accel = await chooseAccelerator({
      configured: config.accel,
      kernel: images.kernel,
      initramfs: images.initramfs,
      qemuVersion: version,
      cacheFile: join(config.dataDir, "accel.json"),
    });
    log.info(
      { accelerator: accel.accel, reason: accel.reason, source: accel.source, qemu: version },
      "server.accelerator",
    );
    // The OOM killer takes a VM (VMM_OOM_SCORE_ADJ) long before the server supervising them.
    await writeFile("/proc/self/oom_score_adj", "-500").catch((err: unknown) =>
      log.warn({ err }, "server.oom_score_unchanged"),
    );
    if (config.ksm === "on") await enableKsm();
    const cgroups = VmCgroups.detect(`${config.networkPrefix}-vms`);
    if (cgroups) {
      const killed = await cgroups.sweep();
      if (killed > 0) log.warn({ count: killed }, "server.vmm_killed");
    } else log.warn("server.no_cgroups: VMs run without cgroup limits");
    watchdog = startVmmWatchdog(cgroups, layout.runDir);
    // In a cluster the catalog is the shared PostgreSQL, scoped to this node's sandboxes.
    const catalog: Catalog = config.databaseUrl
      ? await PostgresCatalog.open({ connectionString: config.databaseUrl, nodeId: config.nodeId })
      : await SqliteCatalog.open(layout.catalog);
    if (config.databaseUrl) {
      cluster = await PostgresCluster.open({ connectionString: config.databaseUrl });
      clusterKey = await cluster.clusterKey();
    }
    const shared = cluster && config.sharedStore ? sharedSnapshots(config, cluster) : undefined;
    store = shared?.store;
    const disks = new Qcow2DiskChains();
    const driver = new QemuDriver({
      accel: accel.accel,
      disks,
      qemuVersion: version,
      identities: new VmmIdentities(config.vmmUidBase, config.vmmUidCount),
      cgroups,
      tcgCacheMiB: config.tcgCacheMiB,
      guestAslr: config.guestAslr === "auto" ? undefined : config.guestAslr === "on",
      mergeMemory: config.ksm === "on",
      // Restores happen only once the orchestrator runs (it checksums captures).
      sealedFiles: async (dir) => orchestrator?.sealedFiles(dir),
    });
    const slots = new NetnsSlotPool({
      size: config.slotPoolSize,
      baseCidr: config.networkCidr,
      ...slotNamesFor(config.networkPrefix),
      logger: root.child({ component: "network" }),
    });
    const host = hostResources();
    const limits = {
      maxSandboxes: config.maxSandboxes,
      maxVcpus: Math.floor(host.cpus * config.vcpuOvercommit),
      maxMemoryMiB: Math.floor(host.memoryMiB * config.memoryOvercommit),
      memoryReserveMiB: config.memoryReserveMiB,
    };
    orchestrator = new Orchestrator({
      catalog,
      driver,
      disks,
      slots,
      agent: new EnvdGuestAgent(),
      images,
      layout,
      limits,
      templateShape: { vcpus: config.templateVcpus, memoryMiB: config.templateMemoryMiB },
      defaultTimeoutMs: config.defaultTimeoutMs,
      maxForkCount: config.maxForkCount,
      flattenDepth: config.flattenDepth,
      maxConcurrentStarts: config.maxConcurrentStarts || host.cpus * 2,
      pool: {
        baseFloor: config.poolSize,
        maxPerTemplate: config.poolMaxPerTemplate,
        maxMemoryMiB: config.poolMaxMemoryMiB,
        idleMs: config.poolIdleMs,
        minAvailableMiB: config.poolMinAvailableMiB,
      },
      accelerator: { accel: accel.accel, reason: accel.reason },
      logger: root.child({ component: "orchestrator" }),
      shared,
      metricsIntervalMs: config.metricsIntervalMs,
    });
    metrics.follow(orchestrator);
    status = { phase: "starting", message: "preparing the base template" };
    await orchestrator.start();
    killedPurge = startKilledPurge(catalog, {
      retentionMs: config.killedRetentionMs,
      logger: root.child({ component: "catalog" }),
    });
    const templateBuilds = new TemplateBuilds({
      catalog,
      host: orchestrator,
      images: registryImages({
        cacheDir: join(dirname(images.baseRootfs), "oci"),
        mirrors: config.registryMirrors,
        insecureRegistries: config.insecureRegistries,
      }),
      dir: join(config.dataDir, "builds"),
      logger: root.child({ component: "builds" }),
      uploadLimitBytes: config.buildUploadLimitMiB * 1024 * 1024,
      stepTimeoutMs: config.buildStepTimeoutMs,
      readyTimeoutMs: config.buildReadyTimeoutMs,
      maxVcpus: host.cpus * 4,
      maxMemoryMiB: Math.floor(host.memoryMiB / 2),
    });
    metrics.follow(templateBuilds);
    await templateBuilds.start();
    builds = templateBuilds;
    late.bind(orchestrator);
    if (cluster) {
      // Registered once recovery is done and the API serves: gateways may route here now.
      const member = orchestrator;
      membership = await startMembership({
        cluster,
        node: {
          id: config.nodeId,
          url: config.nodeUrl ?? url,
          capacity: {
            vcpus: limits.maxVcpus,
            memoryMiB: limits.maxMemoryMiB,
            maxSandboxes: limits.maxSandboxes,
          },
        },
        load: async () => {
          await member.syncPaused();
          return { ...(await member.load()), draining: member.draining };
        },
        intervalMs: config.heartbeatMs,
        logger: root.child({ component: "cluster" }),
        onMarkedDown: async () => {
          await member.reconcile();
        },
        // A gateway also tells the node at once (the internal API); this catches up on
        // changes made while that call failed, or straight in the catalog.
        onState: (state) => {
          const change = state === "draining" ? member.drain() : member.undrain();
          change.catch((err: unknown) => log.warn({ err }, "cluster.drain_failed"));
        },
      });
    }
    log.info({ url }, "server.ready");
  })().catch((err: unknown) => {
    const message = err instanceof Error ? err.message : String(err);
    status = { phase: "failed", message };
    log.error({ err }, "server.start_failed");
    throw err;
  });
  // Callers that do not await `ready` must not crash the process with an unhandled rejection.
  ready.catch(() => {});

  return {
    url,
    get apiKeys() {
      return apiKeys.keys;
    },
    ready,
    logger: log,
    async close() {
      proxy.close(); // open streams would hold the HTTP server open
      await ready.catch(() => {});
      await builds?.close();
      await membership?.stop();
      await killedPurge?.stop(); // before the orchestrator closes the catalog
      await orchestrator?.close();
      if (cluster) {
        // Leaving, not dead: "down" set by the node itself reports nothing lost (its
        // sandboxes are paused, rows kept) and gateways route nothing here until it is back.
        await cluster
          .setNodeState(config.nodeId, "down")
          .catch((err: unknown) => log.warn({ err }, "cluster.leave_failed"));
        await cluster.close();
      }
      await store?.close();
      watchdog?.stop();
      await tls?.close();
      await api.close();
      apiKeys.close();
      log.info("server.closed");
    },
  };
}

/** The shared store of WARREN_SHARED_STORE, as snapshots publish to and fetch from it. */
function sharedSnapshots(config: Readonly<Config>, cluster: PostgresCluster) {
  const store = openSharedStore(config.sharedStore as string, {
    region: config.s3Region,
    ...(config.s3Endpoint && { endpoint: config.s3Endpoint, forcePathStyle: true }),
  });
  return {
    store,
    publish: store.publish.bind(store),
    fetch: store.fetch.bind(store),
    delete: store.delete.bind(store),
    markPublished: (id: string) => cluster.markPublished(id),
    copiesMaxBytes: config.storeCacheMiB * 1024 * 1024,
  };
}

/** `GET /metrics` of the node itself (a sandbox's own /metrics goes through the proxy). */
function isScrape(req: IncomingMessage): boolean {
  return (
    req.method === "GET" && (req.url === "/metrics" || req.url?.startsWith("/metrics?") === true)
  );
}

/** A Prometheus scrape, behind an API key unless WARREN_METRICS_AUTH=none. */
function serveMetrics(
  req: IncomingMessage,
  res: ServerResponse,
  metrics: NodeMetrics,
  config: Readonly<Config>,
  keys: ReadonlySet<string>,
): void {
  try {
    if (config.metricsAuth === "api-key") authenticate(req.headers, keys);
  } catch (err) {
    sendError(res, apiError(err, { "www-authenticate": "Bearer" }));
    return;
  }
  metrics.handle(req, res).catch(() => res.destroy());
}
