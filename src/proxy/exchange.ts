import type { IncomingMessage } from "node:http";
import type { Socket } from "node:net";
import {
  BAD_HEAD,
  errorCode,
  HEAD_TIMEOUT,
  type ProxyErrorBody,
  type RelayOptions,
  type RequestRelayOptions,
  type Upstream,
} from "../relay/index.js";
import type { Logger } from "../shared/index.js";

/** What relaying one admitted request (or upgrade) to a sandbox needs. */
export interface Exchange {
  readonly sandboxId: string;
  readonly port: number;
  /** The sandbox's port, the request's path and headers, the sandbox's own pool. */
  readonly upstream: Upstream;
  readonly idleTimeoutMs: number;
  /** From the request's last byte sent to the response head's last byte received. */
  readonly headTimeoutMs: number;
  /** Largest response head taken from the sandbox. */
  readonly maxResponseHeadBytes: number;
  /** Registers what to do when the sandbox stops; returns the unregistration. */
  readonly track: RelayOptions["track"];
  /**
   * A connection to the port on the guest's loopback, through envd (app ports only): tried
   * when nothing listens on the port at the guest's address.
   */
  readonly loopback?: () => Promise<Socket>;
  readonly logger: Logger;
  /** `performance.now()` when the request arrived. */
  readonly started: number;
  /**
   * Served on the node's own origin (a header- or signature-routed request, not a
   * `<port>-<id>` Host): the guest's answer must not run as that origin's page, where the
   * dashboard keeps its API key. Adds `Content-Security-Policy: sandbox` (an opaque origin).
   */
  readonly onNodeOrigin: boolean;
}

/** What a guest's answer served on the node's own origin carries (Exchange.onNodeOrigin). */
const NODE_ORIGIN_RESPONSE_HEADERS: readonly string[] = [
  "Content-Security-Policy",
  "sandbox",
  "X-Content-Type-Options",
  "nosniff",
];

/** How the proxy relays a plain request: its refusals, its log lines. */
export function requestOptions(exchange: Exchange, req: IncomingMessage): RequestRelayOptions {
  const { sandboxId, port, logger } = exchange;
  const fields = { sandboxId, port, method: req.method };
  return {
    ...relayLimits(exchange),
    ...(exchange.onNodeOrigin && { responseHeaders: NODE_ORIGIN_RESPONSE_HEADERS }),
    refuse: (err, connected) => upstreamErrorBody(exchange, err, connected),
    observer: {
      ended(outcome, status) {
        const line = { ...fields, status, outcome, durationMs: durationMs(exchange.started) };
        logger.debug(line, "proxy.request");
      },
      failed(err, status) {
        const line = {
          ...fields,
          status,
          ...errorFields(err),
          durationMs: durationMs(exchange.started),
        };
        logger.warn(line, "proxy.upstream_error");
      },
    },
  };
}

/** How the proxy relays an upgrade: its refusals, its log lines. */
export function upgradeOptions(exchange: Exchange, req: IncomingMessage): RelayOptions {
  const { sandboxId, port, logger } = exchange;
  const fields = { sandboxId, port, upgrade: req.headers.upgrade };
  return {
    ...relayLimits(exchange),
    refuse: (err, connected) => upstreamErrorBody(exchange, err, connected),
    observer: {
      ended(outcome, status) {
        const line = { ...fields, status, outcome, durationMs: durationMs(exchange.started) };
        logger.debug(line, "proxy.upgrade");
      },
      failed(err) {
        logger.warn(
          { ...fields, ...errorFields(err), durationMs: durationMs(exchange.started) },
          "proxy.upstream_error",
        );
      },
      upgraded() {
        logger.debug({ ...fields, durationMs: durationMs(exchange.started) }, "proxy.upgraded");
      },
    },
  };
}

function relayLimits(exchange: Exchange): RelayOptions {
  const { idleTimeoutMs, headTimeoutMs, maxResponseHeadBytes, track, loopback } = exchange;
  return {
    idleTimeoutMs,
    headTimeoutMs,
    maxResponseHeadBytes,
    track,
    ...(loopback && { fallback: loopback }),
  };
}

function errorFields(err: Error) {
  return { code: errorCode(err), err: err.message };
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

/**
 * The 502/504 body for an upstream failure before any response was relayed. `connected`:
 * the TCP connection was up (a failure then is the server's, not a closed port).
 */
export function upstreamErrorBody(
  exchange: Exchange,
  err: unknown,
  connected: boolean,
): ProxyErrorBody {
  const { sandboxId, port } = exchange;
  const code = errorCode(err);
  const server = `The sandbox's server on port ${port}`;
  if (code === HEAD_TIMEOUT) {
    const message = `${server} did not send a whole response head within ${exchange.headTimeoutMs} ms`;
    return { sandboxId, message, code: 504 };
  }
  if (code === "HPE_HEADER_OVERFLOW") {
    const message = `${server} sent a response head over ${exchange.maxResponseHeadBytes} bytes`;
    return { sandboxId, message, code: 502 };
  }
  if (code === BAD_HEAD) {
    return { sandboxId, message: `${server} sent a response that cannot be relayed`, code: 502 };
  }
  if (code === "ETIMEDOUT" || code === "ESOCKETTIMEDOUT") {
    const message = `The sandbox did not answer on port ${port} within ${exchange.idleTimeoutMs} ms`;
    return { sandboxId, message, code: 504 };
  }
  if (!connected && (code === undefined || CONNECT_ERRORS.has(code))) {
    return { sandboxId, message: `The sandbox is running but port ${port} is not open`, code: 502 };
  }
  return {
    sandboxId,
    message: `${server} closed the connection without answering (${code ?? "unknown error"})`,
    code: 502,
  };
}

export function durationMs(started: number): number {
  return Math.round(performance.now() - started);
}
