import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import { TLSSocket } from "node:tls";
import type { Logger } from "../../shared/index.js";
import { answerRaw, failure, refuse } from "./guest-answers.js";
import {
  agentsFor,
  type Exchange,
  type GuestHttpTarget,
  relayGuestRequest,
  relayGuestUpgrade,
} from "./guest-exchange.js";
import { refusalOf } from "./request-checks.js";
import { resetSocket } from "./reset-socket.js";

export type { GuestHttpTarget } from "./guest-exchange.js";

export interface GuestHttpOptions {
  /** Upstream over TLS verified for the name (Node's roots, plus `ca`); plain HTTP without. */
  readonly tls?: { readonly ca?: readonly string[] };
  /** Headers to set on each request (a rule's, secrets filled), read at each; may throw. */
  readonly setHeaders?: () => Promise<ReadonlyMap<string, string>>;
  /** From a request's last byte to its answer's head, at most. Default 60 s. */
  readonly upstreamHeadTimeoutMs?: number;
  readonly logger?: Logger;
}

/** A request head, from the connection's start or the last answer to its end, at most. */
const HEAD_DEADLINE_MS = 60_000;
/** No byte either way for this long ends a connection, and an exchange with an upstream. */
const IDLE_TIMEOUT_MS = 10 * 60_000;
const UPSTREAM_HEAD_TIMEOUT_MS = 60_000;
/** A request head at most (the guest's), and a response head (the upstream's). */
const MAX_HEADER_BYTES = 32 * 1024;
/** Requests read ahead of their answers (pipelined) on one connection; more cut it. */
const MAX_PENDING_REQUESTS = 32;

/**
 * Serves HTTP/1.1 on a guest connection the gate decided for `target.name` (plain HTTP let
 * through for its Host, or TLS it terminated for header rules): every request is parsed here
 * (node:http), checked (`refusalOf`: origin-form, no CONNECT or TRACE, one Host naming the
 * name), then relayed on its own to the target through `src/relay` (guest-exchange.ts). So
 * request boundaries are the gate's, never the upstream's guess: a stream Node cannot parse
 * is cut, and a request the checks refuse is answered (guest-answers.ts) and ends the
 * connection, with nothing after it relayed. A WebSocket upgrade passes as raw bytes once
 * the upstream answered 101. Returns what cuts the connection.
 */
export function serveGuestHttp(
  socket: Socket,
  target: GuestHttpTarget,
  options: GuestHttpOptions,
): { cut(): void } {
  const exchange: Exchange = {
    target,
    ...agentsFor(target, options.tls),
    limits: {
      idleTimeoutMs: IDLE_TIMEOUT_MS,
      headTimeoutMs: options.upstreamHeadTimeoutMs ?? UPSTREAM_HEAD_TIMEOUT_MS,
      maxResponseHeadBytes: MAX_HEADER_BYTES,
    },
    ...(options.setHeaders && { setHeaders: options.setHeaders }),
    ...(options.logger && { logger: options.logger }),
  };
  let pending = 0;
  /** A request came (a head Node refuses is then not answered: answers go in order). */
  let started = false;
  /** A request was refused: nothing after it on this connection is relayed. */
  let closing = false;
  let deadline: NodeJS.Timeout | undefined;
  const cut = () => {
    clearTimeout(deadline);
    exchange.pooled.destroy();
    // A TLS socket cannot be reset (its handle is not TCP's); a plain one is, as a splice's.
    if (socket instanceof TLSSocket || socket.destroyed) socket.destroy();
    else resetSocket(socket);
  };
  // A guest that starts no request, or never finishes its head, is dropped: Node bounds a
  // head's time only on a server that listens itself, which this one does not.
  const arm = () => {
    clearTimeout(deadline);
    deadline = setTimeout(cut, HEAD_DEADLINE_MS);
  };
  const began = () => {
    started = true;
    clearTimeout(deadline);
  };
  const failed = (what: string) => (err: unknown) =>
    options.logger?.debug({ err, name: target.name }, what);

  const server = createServer({
    maxHeaderSize: MAX_HEADER_BYTES,
    requestTimeout: 0,
    keepAliveTimeout: HEAD_DEADLINE_MS,
  });
  server.timeout = IDLE_TIMEOUT_MS;
  server.on("error", cut);
  server.on("request", (req: IncomingMessage, res: ServerResponse) => {
    began();
    // Pipelined after a refusal: never relayed, never answered (the refusal closes).
    if (closing || socket.destroyed) return void req.resume();
    if (++pending > MAX_PENDING_REQUESTS) return cut();
    res.once("close", () => {
      if (--pending === 0 && !socket.destroyed) arm();
    });
    const refusal = refusalOf(req, target.name);
    if (refusal) {
      closing = true;
      return refuse(res, refusal);
    }
    relayGuestRequest(req, res, exchange).catch((err: unknown) => {
      // A request relay could not even build (Node's client refused it): nothing was sent.
      failed("egress_gate.request_failed")(err);
      refuse(res, failure(err, target.name));
    });
  });
  server.on("upgrade", (req: IncomingMessage, upgraded: Duplex, head: Buffer) => {
    upgraded.on("error", () => {});
    began();
    if (closing) return void upgraded.destroy();
    const refusal = refusalOf(req, target.name);
    if (refusal) return answerRaw(upgraded, refusal);
    relayGuestUpgrade(req, upgraded, head, exchange).catch((err: unknown) => {
      failed("egress_gate.upgrade_failed")(err);
      answerRaw(upgraded, failure(err, target.name));
    });
  });
  server.on("connect", (req: IncomingMessage, tunnel: Duplex) => {
    tunnel.on("error", () => {});
    began();
    answerRaw(tunnel, refusalOf(req, target.name) ?? { status: 405, message: "no CONNECT" });
  });
  server.on("clientError", (err: NodeJS.ErrnoException, broken: Duplex) => {
    // A head Node cannot parse: answered when it was the first, else cut with the rest.
    if (!started && broken.writable && err.code?.startsWith("HPE_")) {
      const status = err.code === "HPE_HEADER_OVERFLOW" ? 431 : 400;
      answerRaw(broken, { status, message: "this is not an HTTP/1.1 request the gate reads" });
    } else {
      broken.destroy();
    }
  });
  socket.once("close", () => {
    clearTimeout(deadline);
    exchange.pooled.destroy();
  });
  arm();
  // Node's own servers set it on what they accept; this socket was accepted by the gate's.
  // Without it a head flushed alone holds its body back a delayed ACK (40 ms) a request.
  socket.setNoDelay(true);
  server.emit("connection", socket);
  // The gate paused it to read its first bytes (put back ahead of the rest by its caller).
  socket.resume();
  return { cut };
}
