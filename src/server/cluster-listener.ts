import type { IncomingMessage, ServerResponse } from "node:http";
import { createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import type { TLSSocket } from "node:tls";
import { INTERNAL_API_PREFIX, isInternalPath } from "../protocol/index.js";
import { apiError, sendError } from "../relay/index.js";
import { type Logger, WarrenError } from "../shared/index.js";
import {
  type ClusterCredentials,
  clusterServerOptions,
  isControlConnection,
  peerIdentity,
} from "../tls/index.js";

export interface ClusterListenerOptions {
  readonly credentials: ClusterCredentials;
  readonly host: string;
  readonly port: number;
  /** What a gateway relays (client traffic): the node's API and sandbox proxy, never /internal. */
  readonly onRequest: (req: IncomingMessage, res: ServerResponse) => void;
  readonly onUpgrade: (req: IncomingMessage, socket: Duplex, head: Buffer) => void;
  /**
   * A gateway's own calls on the internal API, from its control connections (`CONTROL_ALPN`);
   * any other path there is answered 404 here.
   */
  readonly onInternal: (req: IncomingMessage, res: ServerResponse) => void;
  readonly logger: Logger;
}

const CONTROL_ONLY = `a gateway's control connection serves the internal node API (${INTERNAL_API_PREFIX}/) only`;

export interface ClusterListener {
  /** `https://<host>:<port>` as bound (the port resolved when 0 was asked). */
  readonly url: string;
  close(): Promise<void>;
}

/**
 * A node's cluster port (WARREN_CLUSTER_HOST:WARREN_CLUSTER_PORT): the gateways' way in.
 * TLS 1.3 with the node's certificate from the cluster CA; the handshake requires a client
 * certificate from that CA, and a connection whose certificate names no gateway is closed
 * before it is read. Behind that, two channels by the connection's ALPN: a gateway's
 * relay connections reach the node's own handlers (API, sandbox proxy) with API keys and
 * sandbox tokens checked as on the plain port; its control connections reach the internal
 * node API alone (`onInternal`), and no upgrade.
 */
export async function listenCluster(options: ClusterListenerOptions): Promise<ClusterListener> {
  const { credentials, logger } = options;
  // TCP_NODELAY on every gateway connection: API answers are written head, then body.
  const serverOptions = { ...clusterServerOptions(credentials), noDelay: true };
  const server: Server = createServer(serverOptions, (req, res) => {
    if (!fromControlChannel(req)) options.onRequest(req, res);
    else if (isInternalPath(req.url)) options.onInternal(req, res);
    else sendError(res, apiError(new WarrenError("route_not_found", CONTROL_ONLY)));
  });
  server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    if (fromControlChannel(req)) socket.destroy();
    else options.onUpgrade(req, socket, head);
  });
  // After the HTTP server's own listener (which only attaches its parser): closed at once,
  // no byte of a request is read.
  server.on("secureConnection", (socket: TLSSocket) => {
    const peer = peerIdentity(socket);
    if (peer?.role === "gateway") return;
    logger.warn(
      // Null once the peer has gone: a client resetting at once must not crash the node.
      { peer: socket.getPeerCertificate()?.subjectaltname, address: socket.remoteAddress },
      "cluster.peer_refused",
    );
    socket.destroy();
  });
  server.on("tlsClientError", (err: NodeJS.ErrnoException, socket) => {
    logger.debug(
      { err: err.code ?? err.message, address: socket.remoteAddress },
      "cluster.tls_refused",
    );
  });
  try {
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(options.port, options.host, () => resolve());
    });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new WarrenError(
      "invalid_argument",
      `cannot serve the cluster port on ${options.host}:${options.port} (${code}): set WARREN_CLUSTER_HOST and WARREN_CLUSTER_PORT`,
    );
  }
  const { port } = server.address() as AddressInfo;
  const host = options.host.includes(":") ? `[${options.host}]` : options.host;
  const url = `https://${host}:${port}`;
  logger.info({ url, identity: credentials.identity }, "server.cluster_listening");
  return {
    url,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * Whether a request came in on a gateway's control connection to a cluster port (its verified
 * certificate and `CONTROL_ALPN`): the only requests the internal node API takes.
 */
export function fromControlChannel(req: IncomingMessage): boolean {
  return isControlConnection(req.socket);
}
