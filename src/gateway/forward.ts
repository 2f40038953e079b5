import {
  Agent,
  type ClientRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  request,
  type ServerResponse,
} from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import { WarrenError } from "../shared/index.js";

/** Headers that concern one connection only (RFC 9110 7.6.1): never relayed as such. */
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
]);

export interface NodeTarget {
  readonly nodeId: string;
  /** The node server's base URL, e.g. http://10.0.0.2:3000. */
  readonly url: string;
}

/**
 * One keep-alive pool per node: the gateway relays everything a node serves (API calls, envd
 * and app-port traffic) over a few warm connections instead of a handshake per request.
 */
export class NodeAgents {
  readonly #agents = new Map<string, Agent>();

  for(target: NodeTarget): Agent {
    let agent = this.#agents.get(target.url);
    if (!agent) {
      agent = new Agent({ keepAlive: true, maxSockets: 256, timeout: 60_000 });
      this.#agents.set(target.url, agent);
    }
    return agent;
  }

  close(): void {
    for (const agent of this.#agents.values()) agent.destroy();
    this.#agents.clear();
  }
}

/** The request headers to relay: the client's, minus hop-by-hop, plus `x-forwarded-*`. */
export function relayedRequestHeaders(
  req: IncomingMessage,
  options: { upgrade: boolean },
): OutgoingHttpHeaders {
  const listed = connectionTokens(req.headers);
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || listed.has(name)) continue;
    out[name] = value;
  }
  const client = req.socket.remoteAddress;
  const chain = req.headers["x-forwarded-for"];
  if (client) out["x-forwarded-for"] = chain ? `${chain}, ${client}` : client;
  out["x-forwarded-proto"] ??= "http";
  if (req.headers.host !== undefined) out["x-forwarded-host"] ??= req.headers.host;
  if (req.headers["transfer-encoding"] !== undefined) {
    out["transfer-encoding"] = "chunked";
    delete out["content-length"];
  }
  if (options.upgrade && req.headers.upgrade !== undefined) {
    out.connection = "upgrade";
    out.upgrade = req.headers.upgrade;
  }
  return out;
}

function connectionTokens(headers: IncomingHttpHeaders): Set<string> {
  const tokens = new Set<string>();
  for (const token of (headers.connection ?? "").split(",")) {
    const name = token.trim().toLowerCase();
    if (name !== "" && name !== "content-length") tokens.add(name);
  }
  return tokens;
}

function relayedResponseHeaders(rawHeaders: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] ?? "";
    if (HOP_BY_HOP.has(name.toLowerCase())) continue;
    out.push(name, rawHeaders[i + 1] ?? "");
  }
  return out;
}

export interface ForwardOptions {
  readonly agents: NodeAgents;
  /** The body when the gateway has already read it (a create it placed); else the request streams. */
  readonly body?: Buffer;
  /**
   * Called instead of relaying when the node's answer is one the caller wants to act on
   * (a create refused for capacity: try the next node). The response is consumed for it.
   */
  readonly intercept?: (status: number) => boolean;
  /** Idle time on the node's connection before the exchange is cut (ms). */
  readonly idleTimeoutMs: number;
}

export type ForwardOutcome =
  | { readonly kind: "relayed"; readonly status: number }
  | { readonly kind: "intercepted"; readonly status: number; readonly body: Buffer }
  | { readonly kind: "unreachable"; readonly error: WarrenError };

/**
 * Relays one request to a node and its answer back, streaming both bodies. Settles once the
 * outcome is known: relayed (the node answered and the answer is on its way to the client),
 * intercepted (the node answered with a status the caller takes over; nothing was sent) or
 * unreachable (no answer came: nothing was sent, the caller answers).
 */
export function forwardRequest(
  req: IncomingMessage,
  res: ServerResponse,
  target: NodeTarget,
  options: ForwardOptions,
): Promise<ForwardOutcome> {
  return new Promise((resolve) => {
    const url = new URL(req.url ?? "/", target.url);
    const headers = relayedRequestHeaders(req, { upgrade: false });
    if (options.body) {
      delete headers["transfer-encoding"];
      headers["content-length"] = String(options.body.length);
    }
    const upstream: ClientRequest = request(url, {
      method: req.method,
      headers,
      agent: options.agents.for(target),
    });
    let settled = false;
    const settle = (outcome: ForwardOutcome) => {
      if (settled) return;
      settled = true;
      resolve(outcome);
    };
    upstream.setTimeout(options.idleTimeoutMs, () =>
      upstream.destroy(Object.assign(new Error("node idle timeout"), { code: "ETIMEDOUT" })),
    );
    res.once("close", () => {
      if (!res.writableFinished) upstream.destroy();
    });
    upstream.on("response", (answer) => {
      const status = answer.statusCode ?? 502;
      if (options.intercept?.(status)) {
        const chunks: Buffer[] = [];
        answer.on("data", (chunk: Buffer) => chunks.push(chunk));
        answer.on("end", () =>
          settle({ kind: "intercepted", status, body: Buffer.concat(chunks) }),
        );
        answer.on("error", () => settle({ kind: "intercepted", status, body: Buffer.alloc(0) }));
        return;
      }
      res.writeHead(status, answer.statusMessage, relayedResponseHeaders(answer.rawHeaders));
      res.flushHeaders();
      answer.on("error", () => res.destroy());
      answer.once("close", () => {
        // Cut mid-body: the client must not see a clean end.
        if (!answer.complete) res.destroy();
      });
      answer.pipe(res);
      settle({ kind: "relayed", status });
    });
    upstream.on("error", (err: NodeJS.ErrnoException) => {
      if (settled) {
        res.destroy();
        return;
      }
      settle({ kind: "unreachable", error: unreachable(target, err) });
    });
    if (options.body) upstream.end(options.body);
    else if (req.readableEnded) upstream.end();
    else req.pipe(upstream);
  });
}

/**
 * Relays an Upgrade (WebSocket) request: once the node answers 101 the two sockets are
 * piped both ways; any other answer is relayed as is and the socket closed. Resolves false
 * when the node could not be reached (the caller answers the socket).
 */
export function forwardUpgrade(
  req: IncomingMessage,
  client: Duplex,
  head: Buffer,
  target: NodeTarget,
  agents: NodeAgents,
): Promise<ForwardOutcome> {
  return new Promise((resolve) => {
    const upstream = request(new URL(req.url ?? "/", target.url), {
      method: req.method,
      headers: relayedRequestHeaders(req, { upgrade: true }),
      agent: agents.for(target),
    });
    let settled = false;
    client.on("error", () => upstream.destroy());
    client.once("close", () => upstream.destroy());
    upstream.on("upgrade", (answer, socket: Socket, upstreamHead) => {
      settled = true;
      client.write(rawHead(101, answer.statusMessage, answer.rawHeaders));
      if (upstreamHead.length > 0) client.write(upstreamHead);
      if (head.length > 0) socket.write(head);
      socket.setNoDelay(true);
      socket.on("error", () => client.destroy());
      client.on("error", () => socket.destroy());
      socket.once("close", () => client.destroy());
      client.once("close", () => socket.destroy());
      socket.pipe(client);
      client.pipe(socket);
      resolve({ kind: "relayed", status: 101 });
    });
    upstream.on("response", (answer) => {
      settled = true;
      const headers = relayedResponseHeaders(answer.rawHeaders);
      headers.push("connection", "close");
      client.write(rawHead(answer.statusCode ?? 502, answer.statusMessage, headers));
      answer.pipe(client);
      resolve({ kind: "relayed", status: answer.statusCode ?? 502 });
    });
    upstream.on("error", (err: NodeJS.ErrnoException) => {
      if (settled) {
        client.destroy();
        return;
      }
      resolve({ kind: "unreachable", error: unreachable(target, err) });
    });
    upstream.end();
  });
}

function unreachable(target: NodeTarget, err: NodeJS.ErrnoException): WarrenError {
  return new WarrenError(
    "node_unreachable",
    `node ${target.nodeId} (${target.url}) did not answer: ${err.code ?? err.message}`,
    { cause: err },
  );
}

function rawHead(status: number, message: string | undefined, headers: readonly string[]): string {
  const lines = [`HTTP/1.1 ${status} ${message ?? ""}`.trimEnd()];
  for (let i = 0; i + 1 < headers.length; i += 2) lines.push(`${headers[i]}: ${headers[i + 1]}`);
  return `${lines.join("\r\n")}\r\n\r\n`;
}
