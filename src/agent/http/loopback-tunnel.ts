import type { IncomingMessage } from "node:http";
import { connect, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import { LOOPBACK_TUNNEL_PATH, LOOPBACK_TUNNEL_PROTOCOL } from "../../protocol/index.js";
import { ACCESS_TOKEN_HEADER, hasValidToken } from "../auth.js";
import type { AgentState } from "../state.js";

/** Loopback addresses tried in order: a server on `localhost` may be bound to either. */
const LOOPBACK = ["127.0.0.1", "::1"] as const;
const CONNECT_TIMEOUT_MS = 5_000;

/**
 * The proxy's way to a server bound to the guest's loopback (an agent's dev server on
 * 127.0.0.1:3000), as E2B forwards such ports: an Upgrade to `/_warren/loopback/<port>`
 * with the access token; envd connects to the port on 127.0.0.1 (then ::1), answers 101
 * and pipes the two sockets. Nothing listening is 502, so the proxy answers E2B's "port
 * not open". Only loopback, only TCP, only a port: nothing else of the guest is reachable
 * this way that its own address would not reach.
 */
export function handleLoopbackTunnel(
  state: AgentState,
  tunnels: Set<Duplex>,
  req: IncomingMessage,
  client: Duplex,
  head: Buffer,
): void {
  client.on("error", () => {});
  // Upgraded sockets are the agent's to close (the HTTP server forgets them).
  tunnels.add(client);
  client.once("close", () => tunnels.delete(client));
  const port = tunnelPort(req);
  if (port === undefined) {
    refuse(client, 404, "no such upgrade");
    return;
  }
  if (!hasValidToken(state, single(req.headers[ACCESS_TOKEN_HEADER]))) {
    refuse(client, 401, "unauthorized access, please provide a valid access token");
    return;
  }
  connectLoopback(port, (server) => {
    if (!server) {
      refuse(client, 502, `nothing listens on port ${port} of the loopback`);
      return;
    }
    if (client.destroyed) {
      server.destroy();
      return;
    }
    client.write(
      `HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ${LOOPBACK_TUNNEL_PROTOCOL}\r\n\r\n`,
    );
    if (head.length > 0) server.write(head);
    // Either side going away takes the other with it.
    server.on("error", () => client.destroy());
    server.once("close", () => client.destroy());
    client.once("close", () => server.destroy());
    server.pipe(client);
    client.pipe(server);
  });
}

/** The port of a well-formed tunnel request, else undefined. */
function tunnelPort(req: IncomingMessage): number | undefined {
  if (req.method !== "GET") return undefined;
  if (single(req.headers.upgrade)?.toLowerCase() !== LOOPBACK_TUNNEL_PROTOCOL) return undefined;
  const path = (req.url ?? "").split("?")[0] ?? "";
  const match = /^\/(\d{1,5})$/.exec(path.slice(LOOPBACK_TUNNEL_PATH.length));
  if (!path.startsWith(`${LOOPBACK_TUNNEL_PATH}/`) || !match) return undefined;
  const port = Number(match[1]);
  return port >= 1 && port <= 65_535 ? port : undefined;
}

function connectLoopback(port: number, done: (socket: Socket | undefined) => void, next = 0): void {
  const host = LOOPBACK[next];
  if (host === undefined) {
    done(undefined);
    return;
  }
  const socket = connect({ host, port });
  socket.setTimeout(CONNECT_TIMEOUT_MS, () => socket.destroy(new Error("connect timed out")));
  socket.once("connect", () => {
    socket.setTimeout(0);
    socket.removeAllListeners("error");
    done(socket);
  });
  socket.once("error", () => {
    socket.destroy();
    connectLoopback(port, done, next + 1);
  });
}

function refuse(client: Duplex, status: number, message: string): void {
  const body = JSON.stringify({ code: status, message });
  client.end(
    `HTTP/1.1 ${status} ${status === 502 ? "Bad Gateway" : status === 401 ? "Unauthorized" : "Not Found"}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

function single(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}
