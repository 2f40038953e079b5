import type { IncomingMessage, ServerResponse } from "node:http";
import { createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import type { TLSSocket } from "node:tls";
import { type Logger, WarrenError } from "../shared/index.js";
import { type ClusterCredentials, clusterServerOptions, peerIdentity } from "../tls/index.js";

export interface ClusterListenerOptions {
  readonly credentials: ClusterCredentials;
  readonly host: string;
  readonly port: number;
  readonly onRequest: (req: IncomingMessage, res: ServerResponse) => void;
  readonly onUpgrade: (req: IncomingMessage, socket: Duplex, head: Buffer) => void;
  readonly logger: Logger;
}

export interface ClusterListener {
  /** `https://<host>:<port>` as bound (the port resolved when 0 was asked). */
  readonly url: string;
  close(): Promise<void>;
}

/**
 * A node's cluster port (WARREN_CLUSTER_HOST:WARREN_CLUSTER_PORT): the gateways' way in.
 * TLS 1.3 with the node's certificate from the cluster CA; the handshake requires a client
 * certificate from that CA, and a connection whose certificate names no gateway is closed
 * before it is read. Behind that, the node's own handlers (API, sandbox proxy, the internal
 * node API): API keys and sandbox tokens are checked as on the plain port.
 */
export async function listenCluster(options: ClusterListenerOptions): Promise<ClusterListener> {
  const { credentials, logger } = options;
  const server: Server = createServer(clusterServerOptions(credentials), options.onRequest);
  server.on("upgrade", options.onUpgrade);
  // After the HTTP server's own listener (which only attaches its parser): closed at once,
  // no byte of a request is read.
  server.on("secureConnection", (socket: TLSSocket) => {
    const peer = peerIdentity(socket);
    if (peer?.role === "gateway") return;
    logger.warn(
      { peer: socket.getPeerCertificate().subjectaltname, address: socket.remoteAddress },
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

/** Whether a request came in on a cluster port from a gateway (its verified certificate). */
export function fromGateway(req: IncomingMessage): boolean {
  return peerIdentity(req.socket)?.role === "gateway";
}
