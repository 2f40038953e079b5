import { randomBytes } from "node:crypto";
import pino from "pino";
import { PostgresCluster } from "../catalog/index.js";
import { loadConfig } from "../shared/config.js";
import { exitOnSignals } from "../shared/exit-on-signals.js";
import { logDestination } from "../shared/log-destination.js";
import { handleStrayErrors } from "../shared/stray-errors.js";
import { Authenticator } from "../tenancy/index.js";
import { type ClusterCredentials, loadClusterCredentials } from "../tls/index.js";
import { startGateway } from "./gateway.js";

/**
 * `npm run gateway` (bundled as dist/gateway/main.mjs): the cluster's front. Needs the
 * cluster catalog (WARREN_DATABASE_URL), the API keys the nodes accept (WARREN_API_KEYS) and
 * its certificate from the cluster CA (WARREN_CLUSTER_TLS_DIR); listens on
 * WARREN_HOST:WARREN_PORT.
 */
async function main(): Promise<void> {
  let config: ReturnType<typeof loadConfig>;
  let credentials: ClusterCredentials;
  try {
    config = loadConfig();
    if (!config.databaseUrl)
      throw new Error("WARREN_DATABASE_URL is required: the gateway reads the cluster catalog");
    if (config.apiKeys.length === 0) {
      throw new Error(
        "WARREN_API_KEYS is required: the keys clients present, which every node accepts too",
      );
    }
    credentials = await loadClusterCredentials(config.clusterTlsDir, "gateway");
  } catch (err) {
    process.stderr.write(`warren gateway: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(2);
  }
  const logger = pino(
    { level: config.logLevel, base: undefined },
    logDestination(config.logFormat),
  );
  // Stateless: after an uncaught exception it exits, and its supervisor starts a fresh one.
  handleStrayErrors(logger, "gateway", "exit");
  for (const warning of credentials.warnings) logger.warn({ warning }, "gateway.tls_warning");
  const cluster = await PostgresCluster.open({ connectionString: config.databaseUrl });
  const keys = new Set(config.apiKeys);
  const authenticator = new Authenticator({
    // Without a configured admin token the admin routes are closed: nothing can match it.
    adminToken: config.adminToken ?? randomBytes(32).toString("hex"),
    fileKeys: () => keys,
    teams: () => cluster.teams,
  });
  const gateway = await startGateway({
    cluster,
    credentials,
    authenticate: (headers) => authenticator.authenticate(headers),
    domain: config.domain,
    host: config.host,
    port: config.port,
    logger: logger.child({ component: "gateway" }),
    downAfterMs: config.nodeDownAfterMs,
    queueWaitMs: config.gatewayQueueWaitMs,
    maxQueued: config.gatewayMaxQueued,
    idleTimeoutMs: config.proxyIdleTimeoutMs,
  });
  exitOnSignals(logger, "gateway", () => gateway.close().then(() => cluster.close()));
}

void main().catch((err: unknown) => {
  process.stderr.write(`warren gateway: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
