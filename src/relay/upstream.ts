import {
  type Agent,
  type ClientRequest,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  request,
} from "node:http";
import type { Socket } from "node:net";
import { readBounded } from "../shared/index.js";

/** Where a relayed request goes, and what it carries. */
export interface Upstream {
  /** The server's address (a name or an IP literal without brackets). */
  readonly host: string;
  readonly port: number;
  /** Origin-form path and query (`requestPath`). */
  readonly path: string;
  /** What to send (`relayRequestHeaders`). */
  readonly headers: OutgoingHttpHeaders;
  /** The keep-alive pool to take a connection from. Default: a fresh connection. */
  readonly agent?: Agent;
  /** `https:` when the agent's connections are TLS (an `https.Agent`); default `http:`. */
  readonly protocol?: "http:" | "https:";
}

/** Bounds on one exchange with an upstream. */
export interface UpstreamLimits {
  /** Idle time (no byte either way) after which the exchange is cut. */
  readonly idleTimeoutMs: number;
  /**
   * Longest the upstream may take to send a whole response head, counted from the
   * request's last byte: a head trickled a byte at a time never looks idle. Default
   * `idleTimeoutMs`.
   */
  readonly headTimeoutMs?: number;
  /** Largest response head taken (a head is held in memory until whole). Default 64 KiB. */
  readonly maxResponseHeadBytes?: number;
}

/**
 * Node's own default (16 KiB) would do for envd, but app servers send cookies and CSPs; the
 * head is held in memory until whole, so it is bounded all the same.
 */
export const DEFAULT_MAX_RESPONSE_HEAD_BYTES = 64 * 1024;

/** The code of a head timeout (`UpstreamLimits.headTimeoutMs`): Node has none of its own. */
export const HEAD_TIMEOUT = "EHEADTIMEOUT";

export function errorCode(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | undefined)?.code;
}

/**
 * The request to the upstream, bounded in idle time and in time to its response head; over
 * `tunnel` when given (not pooled), else from the upstream's pool. `connected()`: whether
 * its TCP connection got up.
 */
export function upstreamRequest(
  upstream: Upstream,
  method: string | undefined,
  limits: UpstreamLimits,
  tunnel?: Socket,
): { request: ClientRequest; connected: () => boolean } {
  const sent = request({
    host: upstream.host,
    port: upstream.port,
    // Over a tunnel the caller's socket is the connection, TLS already when it must be.
    protocol: tunnel ? undefined : upstream.protocol,
    method,
    path: upstream.path,
    headers: upstream.headers,
    ...(tunnel ? { createConnection: () => tunnel } : { agent: upstream.agent ?? false }),
    maxHeaderSize: limits.maxResponseHeadBytes ?? DEFAULT_MAX_RESPONSE_HEAD_BYTES,
  });
  // Every connection to an upstream without Nagle's delay (TCP_NODELAY): a pool's sockets
  // have it only for plain HTTP (Node's Agent leaves TLS connections without it), and a
  // tunnel is whatever socket the caller made.
  sent.once("socket", (socket: Socket) => socket.setNoDelay(true));
  const connected = trackConnected(sent);
  sent.setTimeout(limits.idleTimeoutMs, () => sent.destroy(idleTimeoutError()));
  limitHeadTime(sent, limits.headTimeoutMs ?? limits.idleTimeoutMs);
  return { request: sent, connected };
}

/** Calls `fn` once the request's socket is connected (at once for a reused one). */
export function onConnected(req: ClientRequest, fn: () => void): void {
  req.once("socket", (socket: Socket) => {
    if (socket.connecting) socket.once("connect", fn);
    else fn();
  });
}

/** Tracks whether a request's socket got connected (a reused one is). */
function trackConnected(req: ClientRequest): () => boolean {
  let connected = false;
  onConnected(req, () => {
    connected = true;
  });
  return () => connected;
}

/**
 * Bounds the time to a response head, counted from the request's last byte (an upload of
 * any length is not cut). Call with the request before its `end()`.
 */
function limitHeadTime(req: ClientRequest, headTimeoutMs: number): void {
  let timer: NodeJS.Timeout | undefined;
  const clear = () => clearTimeout(timer);
  req.once("finish", () => {
    timer = setTimeout(() => {
      const err: NodeJS.ErrnoException = new Error("upstream response head timeout");
      err.code = HEAD_TIMEOUT;
      req.destroy(err);
    }, headTimeoutMs);
  });
  req.once("response", clear);
  req.once("upgrade", clear);
  req.once("close", clear);
}

function idleTimeoutError(): NodeJS.ErrnoException {
  const err: NodeJS.ErrnoException = new Error("upstream idle timeout");
  err.code = "ETIMEDOUT";
  return err;
}

/**
 * When nothing listens at the upstream's address (a refused connection before any byte),
 * tries `fallback` (the proxy's loopback tunnel): `retry` gets its socket, `fail` runs when
 * it found nothing either. False (nothing started) for any other failure.
 */
export function viaFallback(
  fallback: (() => Promise<Socket>) | undefined,
  err: unknown,
  connected: boolean,
  then: { settled: () => boolean; retry: (tunnel: Socket) => void; fail: () => void },
): boolean {
  if (!fallback || connected || errorCode(err) !== "ECONNREFUSED") return false;
  fallback().then((tunnel) => {
    if (then.settled()) tunnel.destroy();
    else then.retry(tunnel);
  }, then.fail);
  return true;
}

/** An answer's body, whole; rejects past `maxBytes` (the answer is then destroyed). */
export async function readWhole(answer: IncomingMessage, maxBytes: number): Promise<Buffer> {
  try {
    return await readBounded(answer, maxBytes, {
      tooLarge: () => new Error(`answer over ${maxBytes} bytes`),
    });
  } catch (err) {
    throw answer.complete ? err : new Error("the answer was cut short", { cause: err });
  }
}

/** The code of a response head Node would not send on (a status out of range, say). */
export const BAD_HEAD = "EBADHEAD";
