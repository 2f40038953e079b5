import { type Agent, type ClientRequest, type OutgoingHttpHeaders, request } from "node:http";
import type { Socket } from "node:net";
import type { ProxyRoute } from "../orchestrator/types.js";
import type { Logger } from "../shared/index.js";

/** What forwarding one admitted request (or upgrade) needs. */
export interface Exchange {
  readonly sandboxId: string;
  readonly port: number;
  readonly route: ProxyRoute;
  /** Origin-form path and query. */
  readonly path: string;
  readonly headers: OutgoingHttpHeaders;
  /** The sandbox's own keep-alive pool. */
  readonly agent: Agent;
  readonly idleTimeoutMs: number;
  /** From the request's last byte sent to the response head's last byte received. */
  readonly headTimeoutMs: number;
  /** Largest response head taken from the sandbox. */
  readonly maxResponseHeadBytes: number;
  readonly logger: Logger;
  /** `performance.now()` when the request arrived. */
  readonly started: number;
  /** Registers what to do when the sandbox stops; returns the unregistration. */
  track(cut: () => void): () => void;
  /**
   * A connection to the port on the guest's loopback, through envd (app ports only): tried
   * when nothing listens on the port at the guest's address.
   */
  readonly loopback?: () => Promise<Socket>;
  /**
   * Served on the node's own origin (a header- or signature-routed request, not a
   * `<port>-<id>` Host): the guest's answer must not run as that origin's page, where the
   * dashboard keeps its API key. Adds `Content-Security-Policy: sandbox` (an opaque origin).
   */
  readonly onNodeOrigin: boolean;
}

/** What a guest's answer served on the node's own origin carries (Exchange.onNodeOrigin). */
export const NODE_ORIGIN_RESPONSE_HEADERS: readonly string[] = [
  "Content-Security-Policy",
  "sandbox",
  "X-Content-Type-Options",
  "nosniff",
];

/** Connection-level failures: nothing listens on the port, or the address is gone. */
const CONNECT_ERRORS = new Set([
  "ECONNREFUSED",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EHOSTDOWN",
  "ENETDOWN",
  "EADDRNOTAVAIL",
  "ECONNRESET",
  "EPIPE",
]);

export function errorCode(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | undefined)?.code;
}

/**
 * The 502/504 body for an upstream failure before any response arrived. `connected`: the
 * TCP connection was up (a failure then is the server's, not a closed port).
 */
export function upstreamErrorBody(exchange: Exchange, err: unknown, connected: boolean) {
  const { sandboxId, port } = exchange;
  const code = errorCode(err);
  if (code === HEAD_TIMEOUT) {
    return {
      sandboxId,
      message: `The sandbox's server on port ${port} did not send a whole response head within ${exchange.headTimeoutMs} ms`,
      code: 504,
    };
  }
  if (code === "HPE_HEADER_OVERFLOW") {
    return {
      sandboxId,
      message: `The sandbox's server on port ${port} sent a response head over ${exchange.maxResponseHeadBytes} bytes`,
      code: 502,
    };
  }
  if (code === "ETIMEDOUT" || code === "ESOCKETTIMEDOUT") {
    return {
      sandboxId,
      message: `The sandbox did not answer on port ${port} within ${exchange.idleTimeoutMs} ms`,
      code: 504,
    };
  }
  if (!connected && (code === undefined || CONNECT_ERRORS.has(code))) {
    return { sandboxId, message: `The sandbox is running but port ${port} is not open`, code: 502 };
  }
  return {
    sandboxId,
    message: `The sandbox's server on port ${port} closed the connection without answering (${code ?? "unknown error"})`,
    code: 502,
  };
}

/**
 * The request to the sandbox's port for an exchange, bounded in idle time and in time to
 * its response head; over `tunnel` when given (a loopback tunnel through envd, not pooled),
 * else from the sandbox's pool. `connected()`: whether its TCP connection got up.
 */
export function upstreamRequest(
  exchange: Exchange,
  method: string | undefined,
  tunnel?: Socket,
): { request: ClientRequest; connected: () => boolean } {
  const sent = request({
    host: exchange.route.host,
    port: exchange.route.port,
    method,
    path: exchange.path,
    headers: exchange.headers,
    ...(tunnel ? { createConnection: () => tunnel } : { agent: exchange.agent }),
    maxHeaderSize: exchange.maxResponseHeadBytes,
  });
  const connected = trackConnected(sent);
  sent.setTimeout(exchange.idleTimeoutMs, () => sent.destroy(idleTimeoutError()));
  limitHeadTime(sent, exchange.headTimeoutMs);
  return { request: sent, connected };
}

/**
 * When nothing listens on an app port at the guest's address (a refused connection), tries
 * its loopback through envd: `retry` gets the tunnel, `fail` runs when envd found nothing
 * there either. False (nothing started) for any other failure, or on envd's own port.
 */
export function viaLoopback(
  exchange: Exchange,
  err: unknown,
  connected: boolean,
  then: { settled: () => boolean; retry: (tunnel: Socket) => void; fail: () => void },
): boolean {
  const { loopback } = exchange;
  if (!loopback || connected || errorCode(err) !== "ECONNREFUSED") return false;
  loopback().then((tunnel) => {
    if (then.settled()) tunnel.destroy();
    else then.retry(tunnel);
  }, then.fail);
  return true;
}

/** Calls `fn` once the request's socket is connected (at once for a reused one). */
export function onConnected(req: ClientRequest, fn: () => void): void {
  req.once("socket", (socket: Socket) => {
    if (socket.connecting) socket.once("connect", fn);
    else fn();
  });
}

/** Tracks whether a request's socket got connected (a reused one is). */
export function trackConnected(req: ClientRequest): () => boolean {
  let connected = false;
  req.once("socket", (socket: Socket) => {
    if (!socket.connecting) connected = true;
    else
      socket.once("connect", () => {
        connected = true;
      });
  });
  return () => connected;
}

/** The code of `headTimeoutError`: Node has none of its own for it. */
const HEAD_TIMEOUT = "EHEADTIMEOUT";

/**
 * Bounds the time to a response head, counted from the request's last byte (an upload of
 * any length is not cut): a head trickled one byte at a time keeps a socket busy, so the
 * idle timeout alone would never end it. Call with the request before its `end()`.
 */
export function limitHeadTime(req: ClientRequest, headTimeoutMs: number): void {
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

export function idleTimeoutError(): NodeJS.ErrnoException {
  const err: NodeJS.ErrnoException = new Error("upstream idle timeout");
  err.code = "ETIMEDOUT";
  return err;
}

export function durationMs(started: number): number {
  return Math.round(performance.now() - started);
}
