import type { Agent, ClientRequest, OutgoingHttpHeaders } from "node:http";
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
  readonly logger: Logger;
  /** `performance.now()` when the request arrived. */
  readonly started: number;
  /** Registers what to do when the sandbox stops; returns the unregistration. */
  track(cut: () => void): () => void;
}

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

export function idleTimeoutError(): NodeJS.ErrnoException {
  const err: NodeJS.ErrnoException = new Error("upstream idle timeout");
  err.code = "ETIMEDOUT";
  return err;
}

export function durationMs(started: number): number {
  return Math.round(performance.now() - started);
}
