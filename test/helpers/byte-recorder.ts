/**
 * A listener an attacker would put where a node row points: it accepts connections and keeps
 * every byte it is sent, and answers nothing. Plain TCP (it sees whatever goes in clear) or
 * TLS with a certificate of the attacker's (it sees what a client agreed to send it once the
 * handshake passed). Either way the test asks: did a client's API key reach it? A connection
 * quiet for QUIET_MS is closed, so that a client it took in is not left waiting.
 */

import type { AddressInfo } from "node:net";
import { createServer as createTcpServer, type Server, type Socket } from "node:net";
import { createServer as createTlsServer } from "node:tls";

const QUIET_MS = 300;

export interface ByteRecorder {
  /** `https://127.0.0.1:<port>`: where a repointed row sends the gateway. */
  readonly url: string;
  /** Connections accepted (TCP), whatever became of them. */
  readonly connections: number;
  /** Everything received, in order (decrypted, for a TLS recorder). */
  received(): Buffer;
  /** The first bytes of each connection as they came off the wire (TCP recorders only). */
  readonly firstBytes: Buffer[];
  close(): Promise<void>;
}

export async function startByteRecorder(tls?: {
  readonly cert: string;
  readonly key: string;
}): Promise<ByteRecorder> {
  const chunks: Buffer[] = [];
  const firstBytes: Buffer[] = [];
  const sockets = new Set<Socket>();
  let connections = 0;
  const keep = (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    socket.on("error", () => {});
    socket.setTimeout(QUIET_MS, () => socket.destroy());
  };
  let server: Server;
  if (tls) {
    const secure = createTlsServer({ cert: tls.cert, key: tls.key }, (socket) => {
      keep(socket);
      socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    });
    secure.on("tlsClientError", () => {});
    secure.on("connection", (socket: Socket) => {
      connections += 1;
      keep(socket);
    });
    server = secure;
  } else {
    server = createTcpServer((socket) => {
      connections += 1;
      keep(socket);
      socket.once("data", (chunk: Buffer) => firstBytes.push(chunk.subarray(0, 16)));
      socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    });
  }
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `https://127.0.0.1:${port}`,
    get connections() {
      return connections;
    },
    received: () => Buffer.concat(chunks),
    firstBytes,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
