import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import { fileURLToPath } from "node:url";
import type { Logger } from "pino";
import { createApi } from "../api/index.js";
import type { TemplateBuilds } from "../builds/index.js";
import type { Webhooks } from "../events/index.js";
import type { Orchestrator, ServerStatus } from "../orchestrator/index.js";
import { SandboxProxy } from "../proxy/index.js";
import { apiError, sendError } from "../relay/index.js";
import type { Secrets } from "../secrets/index.js";
import type { Config } from "../shared/config.js";
import type { Authenticator, TeamAdmin } from "../tenancy/index.js";
import type { ClusterCredentials } from "../tls/index.js";
import type { Volumes } from "../volumes/index.js";
import { type ClusterListener, fromControlChannel, listenCluster } from "./cluster-listener.js";
import { dashboardFiles } from "./dashboard-files.js";
import type { Late } from "./late.js";
import type { NodeMetrics } from "./prometheus.js";
import { listenTls } from "./tls-listener.js";

/** The dashboard's built files (`npm run build`): from the bundle in dist/server or from source. */
const DASHBOARD_DIR = fileURLToPath(new URL("../../dist/dashboard", import.meta.url));

export interface FrontOptions {
  readonly config: Readonly<Config>;
  readonly logger: Logger;
  /** Who a request is from (team key or admin token). */
  readonly authenticator: Authenticator;
  /** Teams and keys, once the catalog is open (throws 503 until then). */
  readonly teamAdmin: () => TeamAdmin;
  /** Volumes, once the catalog is open (throws 503 until then). */
  readonly volumes: () => Volumes;
  /** Secrets, once the catalog is open (throws 503 until then). */
  readonly secrets: () => Secrets;
  readonly webhooks: () => Webhooks;
  /** The node's phase, answered while it starts. */
  readonly status: () => ServerStatus;
  /** The orchestrator, once the node has started. */
  readonly orchestrator: Late<Orchestrator>;
  readonly builds: Late<TemplateBuilds>;
  /**
   * A node in a cluster: its credentials from the cluster CA, for the cluster port (the
   * gateways' way in, and the only way to the internal node API).
   */
  readonly cluster?: ClusterCredentials;
  readonly metrics: NodeMetrics;
}

export interface Front {
  /** Where it listens, e.g. http://127.0.0.1:3000. */
  readonly url: string;
  /** A node in a cluster: its cluster port, e.g. https://0.0.0.0:3443. */
  readonly clusterUrl?: string;
  /** Cuts the proxy's open streams, which would hold the HTTP server open. */
  stopProxy(): void;
  close(): Promise<void>;
}

/**
 * The node's one port, answering at once (the API 503, the proxy 502, while the node
 * starts): a request with sandbox routing (an E2b-Sandbox-Id header, a `<port>-<id>.` Host
 * or a signed file URL) goes to the proxy, a scrape to the metrics, the dashboard's files to
 * it, the rest to the API. In domain mode an HTTPS listener serves the same; in a cluster,
 * the cluster port too (mutual TLS, gateways only), the one place the internal node API
 * answers.
 */
export async function listenFront(options: FrontOptions): Promise<Front> {
  const { config, logger, authenticator, metrics } = options;
  const proxy = new SandboxProxy({
    router: () => options.orchestrator.current,
    domain: config.domain,
    idleTimeoutMs: config.proxyIdleTimeoutMs,
    headTimeoutMs: config.proxyHeadTimeoutMs,
    logger: logger.child({ component: "proxy" }),
  });
  // A stopped sandbox's streams end at once (the orchestrator stops them; the proxy holds them).
  options.orchestrator.whenBound((o) => o.onSandboxStopped((id) => proxy.sandboxStopped(id)));
  const dashboard = config.dashboard === "on" ? dashboardFiles(DASHBOARD_DIR) : undefined;
  let handleApi: ((req: IncomingMessage, res: ServerResponse) => void) | undefined;
  const onRequest = (req: IncomingMessage, res: ServerResponse) => {
    if (proxy.matches(req)) proxy.handleRequest(req, res);
    else if (isScrape(req)) serveMetrics(req, res, metrics, config, authenticator);
    else if (dashboard?.matches(req)) dashboard.serve(req, res).catch(() => res.destroy());
    else handleApi?.(req, res);
  };
  const onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    if (proxy.matches(req)) proxy.handleUpgrade(req, socket, head);
    else socket.destroy();
  };
  let http: Server | undefined;
  const api = createApi({
    service: () => options.orchestrator.get(),
    status: options.status,
    builds: () => options.builds.get(),
    authenticate: (headers) => authenticator.authenticate(headers),
    teamAdmin: options.teamAdmin,
    volumes: options.volumes,
    secrets: options.secrets,
    webhooks: options.webhooks,
    domain: config.domain ?? null,
    defaultTimeoutMs: config.defaultTimeoutMs,
    maxTimeoutMs: config.maxTimeoutMs,
    logger: logger.child({ component: "api" }),
    onAnswered: (status, reason) => metrics.apiAnswered(status, reason),
    ...(options.cluster
      ? { internal: { service: () => options.orchestrator.get(), fromControl: fromControlChannel } }
      : {}),
    serverFactory: (handler) => {
      handleApi = handler;
      http = createServer(onRequest);
      http.on("upgrade", onUpgrade);
      return http;
    },
  });
  await api.listen({ host: config.host, port: config.port });
  const address = http?.address() as AddressInfo;
  const log = logger.child({ component: "server" });
  const credentials = options.cluster;
  let cluster: ClusterListener | undefined;
  const tls = await listenTls(config, onRequest, onUpgrade, log)
    .then(async (listening) => {
      if (credentials) {
        cluster = await listenCluster({
          credentials,
          host: config.clusterHost,
          port: config.clusterPort,
          onRequest,
          onUpgrade,
          onInternal: (req, res) => handleApi?.(req, res),
          logger: log,
        }).catch(async (err: unknown) => {
          await listening?.close();
          throw err;
        });
      }
      return listening;
    })
    .catch(async (err: unknown) => {
      await api.close();
      throw err;
    });
  return {
    url: `http://${config.host}:${address.port}`,
    clusterUrl: cluster?.url,
    stopProxy: () => proxy.close(),
    async close() {
      await cluster?.close();
      await tls?.close();
      await api.close();
    },
  };
}

/** `GET /metrics` of the node itself (a sandbox's own /metrics goes through the proxy). */
function isScrape(req: IncomingMessage): boolean {
  return (
    req.method === "GET" && (req.url === "/metrics" || req.url?.startsWith("/metrics?") === true)
  );
}

/** A Prometheus scrape, behind the admin token unless WARREN_METRICS_AUTH=none. */
function serveMetrics(
  req: IncomingMessage,
  res: ServerResponse,
  metrics: NodeMetrics,
  config: Readonly<Config>,
  authenticator: Authenticator,
): void {
  const authorized =
    config.metricsAuth === "none" ? undefined : authenticator.authenticateAdmin(req.headers);
  Promise.resolve(authorized)
    .then(() => metrics.handle(req, res))
    .catch((err: unknown) => {
      if (res.headersSent) res.destroy();
      else sendError(res, apiError(err, { "www-authenticate": "Bearer" }));
    });
}
