import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { type Logger, silentLogger } from "../shared/index.js";
import type { Caller } from "../tenancy/index.js";
import type { ClusterCredentials } from "../tls/index.js";
import type { GatewayCluster } from "./cluster.js";
import { Creates } from "./creates.js";
import { NodeAgents } from "./forward.js";
import { GatewayHandler } from "./gateway-handler.js";
import { InternalCalls } from "./internal-calls.js";
import { NodeDirectory } from "./node-directory.js";
import { SandboxLocator } from "./sandbox-locator.js";
import { TeamAdmission } from "./team-admission.js";
export interface GatewayOptions {
  readonly cluster: GatewayCluster;
  /**
   * The gateway's certificate from the cluster CA (`loadClusterCredentials(dir, "gateway")`):
   * every connection to a node is made with it, to a node whose certificate names it.
   */
  readonly credentials: ClusterCredentials;
  /** Keys accepted on the API (the nodes accept the same: the gateway relays the client's). */
  /** Who a request is from (a team's key in the cluster catalog, or the admin token). */
  readonly authenticate: (headers: IncomingHttpHeaders) => Promise<Caller>;
  /** Sandbox Host names are `<port>-<id>.<domain>` when set. */
  readonly domain?: string;
  readonly host: string;
  readonly port: number;
  readonly logger?: Logger;
  /** Node list refresh period (ms); default 1000. */
  readonly refreshMs?: number;
  /** A node silent this long is marked down (ms); default 10 000. */
  readonly downAfterMs?: number;
  /** Creates waiting for room at once; default 256. */
  readonly maxQueued?: number;
  /** How long a create waits for room (ms); default 10 000. */
  readonly queueWaitMs?: number;
  /** Idle time on a node connection before a relayed exchange is cut (ms); default 620 000. */
  readonly idleTimeoutMs?: number;
}

export interface Gateway {
  readonly url: string;
  readonly directory: NodeDirectory;
  close(): Promise<void>;
}

/**
 * The cluster's front: the E2B API and the sandbox proxy, as a node server serves them, over
 * many nodes. Stateless (any number run side by side): where each sandbox lives and which
 * nodes are up is in the cluster catalog. Every call about one sandbox, and every request to
 * one, is relayed to its node and streamed both ways (GatewayHandler).
 */
export async function startGateway(options: GatewayOptions): Promise<Gateway> {
  const logger = options.logger ?? silentLogger;
  const idleTimeoutMs = options.idleTimeoutMs ?? 620_000;
  const heartbeatTimeoutMs = options.downAfterMs ?? 10_000;
  const { cluster } = options;
  const agents = new NodeAgents(options.credentials, logger);
  const directory = new NodeDirectory({
    cluster,
    refreshMs: options.refreshMs ?? 1000,
    downAfterMs: heartbeatTimeoutMs,
    logger,
  });
  const internal = new InternalCalls(options.credentials, logger);
  const handler = new GatewayHandler({
    cluster,
    authenticate: options.authenticate,
    teams: new TeamAdmission(cluster, cluster.teams),
    domain: options.domain,
    agents,
    directory,
    creates: new Creates({
      directory,
      agents,
      logger,
      maxQueued: options.maxQueued ?? 256,
      maxWaitMs: options.queueWaitMs ?? 10_000,
      heartbeatTimeoutMs,
      idleTimeoutMs,
    }),
    locator: new SandboxLocator({
      cluster,
      directory,
      heartbeatTimeoutMs,
      // The fetch of its snapshot is the long part: as long as a resume may take.
      adopt: (target, id) => internal.adopt(target, id, idleTimeoutMs),
      logger,
    }),
    internal,
    heartbeatTimeoutMs,
    idleTimeoutMs,
    logger,
  });
  // TCP_NODELAY on every client connection (Node's default for http, said here): the relay
  // sets it again on each socket it relays, whatever made it.
  const server: Server = createServer({ noDelay: true }, handler.onRequest);
  server.on("upgrade", handler.onUpgrade);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => resolve());
  });
  directory.start();
  const url = `http://${options.host}:${(server.address() as AddressInfo).port}`;
  logger.info({ url }, "gateway.listening");
  return {
    url,
    directory,
    async close() {
      directory.stop();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      agents.close();
      internal.close();
    },
  };
}
