import pino, { type Logger } from "pino";
import type { TemplateBuilds } from "../builds/index.js";
import type { TeamCatalog } from "../catalog/index.js";
import type { Webhooks } from "../events/index.js";
import {
  ensureLayout,
  type Orchestrator,
  type ServerStatus,
  stateLayout,
} from "../orchestrator/index.js";
import type { Secrets } from "../secrets/index.js";
import type { Config } from "../shared/config.js";
import { WarrenError } from "../shared/index.js";
import { Authenticator, loadAdminToken, TeamAdmin, type TeamSandboxes } from "../tenancy/index.js";
import { type ClusterCredentials, loadClusterCredentials } from "../tls/index.js";
import type { Volumes } from "../volumes/index.js";
import { LiveApiKeys, loadApiKeys } from "./api-keys.js";
import { CloseStack } from "./close-stack.js";
import { listenFront } from "./front.js";
import { Late } from "./late.js";
import { type SimulatedMachine, startNodeParts } from "./node-parts.js";
import { NodeMetrics } from "./prometheus.js";

export type { SimulatedMachine } from "./node-parts.js";

export interface NodeServer {
  /** Where it listens, e.g. http://127.0.0.1:3000. */
  readonly url: string;
  /** The keys accepted now (the key file is re-read when it changes). */
  readonly apiKeys: ReadonlySet<string>;
  /** Settles when the orchestrator is ready (or rejects when starting failed). */
  readonly ready: Promise<void>;
  readonly logger: Logger;
  /**
   * Stops everything; running sandboxes are paused, or with `onStop: "detach"` (default:
   * WARREN_ON_STOP) left running in the keeper for the next server on this data dir.
   */
  close(options?: { onStop?: "pause" | "detach" }): Promise<void>;
}

/**
 * The composition root: the node's one port listens at once (`listenFront`: the API answers
 * 503 while starting), then the parts that run sandboxes start behind it (`startNodeParts`:
 * host setup, VMM driver, catalog, orchestrator, template builds, the cluster) and are bound
 * to it as they come (`Late`). Closing stops everything in the reverse order.
 */
export async function startNodeServer(
  config: Readonly<Config>,
  logger?: Logger,
  options: {
    /** Benchmarks only (bench/lib/uncontained-server.ts): QemuDriverConfig's. */
    uncontainedForBenchmarks?: boolean;
    /** Benchmarks only (bench/lib/simulated-nodes.ts): see SimulatedMachine. */
    simulatedForBenchmarks?: SimulatedMachine;
  } = {},
): Promise<NodeServer> {
  const root = logger ?? pino({ level: config.logLevel, base: undefined });
  const log = root.child({ component: "server" });
  const layout = stateLayout(config.dataDir);
  await ensureLayout(layout);
  const closers = new CloseStack();
  // Before anything listens: a cluster member without its credentials does not start.
  const cluster = config.databaseUrl ? await clusterCredentials(config, log) : undefined;
  const apiKeys = await openApiKeys(config, layout.secretsDir, log);
  closers.add("api keys", () => apiKeys.close());
  const admin = config.adminToken
    ? { token: config.adminToken }
    : await loadAdminToken(layout.secretsDir);

  let status: ServerStatus = { phase: "starting", message: "setting the host up" };
  const orchestrator = new Late<Orchestrator>(() => status);
  // The orchestrator's own once it runs (ready, draining); the starting steps before.
  const nodeStatus = () => orchestrator.current?.status() ?? status;
  const builds = new Late<TemplateBuilds>(() => status);
  const teams = new Late<TeamCatalog>(() => status);
  const teamSandboxes = new Late<TeamSandboxes>(() => status);
  const volumes = new Late<Volumes>(() => status);
  const secrets = new Late<Secrets>(() => status);
  const webhooks = new Late<Webhooks>(() => status);
  const metrics = new NodeMetrics(() => orchestrator.current?.stats());
  const authenticator = new Authenticator({
    adminToken: admin.token,
    fileKeys: () => apiKeys.keys,
    teams: () => teams.current,
    logger: log,
  });
  const front = await listenFront({
    config,
    logger: root,
    authenticator,
    teamAdmin: () => new TeamAdmin(teams.get(), teamSandboxes.get()),
    volumes: () => volumes.get(),
    secrets: () => secrets.get(),
    webhooks: () => webhooks.get(),
    status: nodeStatus,
    orchestrator,
    builds,
    cluster,
    metrics,
  }).catch((err: unknown) => {
    apiKeys.close();
    throw err;
  });
  closers.add("front", () => front.close());
  log.info({ url: front.url, dataDir: config.dataDir }, "server.listening");

  let onStop = config.onStop;
  const ready = startNodeParts({
    onStop: () => onStop,
    config,
    logger: root,
    layout,
    url: front.url,
    clusterUrl: front.clusterUrl,
    step: (message) => {
      status = { phase: "starting", message };
    },
    orchestrator,
    builds,
    teams,
    teamSandboxes,
    volumes,
    secrets,
    webhooks,
    metrics,
    closers,
    uncontainedForBenchmarks: options.uncontainedForBenchmarks,
    simulatedForBenchmarks: options.simulatedForBenchmarks,
  }).catch((err: unknown) => {
    const message = err instanceof Error ? err.message : String(err);
    status = { phase: "failed", message };
    log.error({ err }, "server.start_failed");
    throw err;
  });
  // Callers that do not await `ready` must not crash the process with an unhandled rejection.
  ready.catch(() => {});

  return {
    url: front.url,
    get apiKeys() {
      return apiKeys.keys;
    },
    ready,
    logger: log,
    async close(options = {}) {
      onStop = options.onStop ?? onStop;
      front.stopProxy(); // open streams would hold the HTTP server open
      await ready.catch(() => {});
      await closers.close(log);
      log.info("server.closed");
    },
  };
}

/** The API keys: the file's (made, with a first key, on the first start) and the configured. */
async function openApiKeys(
  config: Readonly<Config>,
  secretsDir: string,
  log: Logger,
): Promise<LiveApiKeys> {
  const loaded = await loadApiKeys(secretsDir, config.apiKeys);
  if (loaded.generated) {
    // Where, never what: stderr ends up in the journal, which more people read than the file.
    process.stderr.write(
      `\nWarren made an API key for the default team: read it from ${loaded.file} (root only)\n\n`,
    );
  }
  // Edits to the key file apply without a restart: removing a key revokes it.
  return new LiveApiKeys(loaded, config.apiKeys, { logger: log });
}

/**
 * A cluster member's credentials (WARREN_CLUSTER_TLS_DIR: the cluster CA, this node's
 * certificate naming WARREN_NODE_ID, its key), and the address gateways reach it at.
 */
async function clusterCredentials(
  config: Readonly<Config>,
  log: Logger,
): Promise<ClusterCredentials> {
  if (!config.nodeUrl && ["0.0.0.0", "::", ""].includes(config.clusterHost)) {
    throw new WarrenError(
      "invalid_argument",
      `WARREN_NODE_URL is required while WARREN_CLUSTER_HOST is ${config.clusterHost || "unset"}: ` +
        `the https://<address>:${config.clusterPort} gateways reach this node at`,
    );
  }
  const credentials = await loadClusterCredentials(config.clusterTlsDir, "node", config.nodeId);
  for (const warning of credentials.warnings) log.warn({ warning }, "cluster.tls_warning");
  log.info(
    { dir: config.clusterTlsDir, notAfter: credentials.notAfter.toISOString() },
    "cluster.tls_loaded",
  );
  return credentials;
}
