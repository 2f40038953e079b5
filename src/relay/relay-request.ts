import type { ClientRequest, IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { proxyRefusal } from "./error-answer.js";
import { relayResponseHeaders } from "./headers.js";
import type { Cut, RelayOptions, RelayOutcome } from "./relay-options.js";
import { sendError } from "./send-error.js";
import {
  BAD_HEAD,
  errorCode,
  onConnected,
  readWhole,
  type Upstream,
  upstreamRequest,
  viaFallback,
} from "./upstream.js";

export interface RequestRelayOptions extends RelayOptions {
  /** The body when the caller has already read it (sent with its length); else `req` streams. */
  readonly body?: Buffer;
  /** Answers the caller takes over (read whole, up to 64 KiB, and not relayed), by status. */
  readonly intercept?: (status: number) => boolean;
  /** Added to every relayed response head (a flat name/value list). */
  readonly responseHeaders?: readonly string[];
}

/** Largest intercepted answer kept; the rest is dropped. */
const MAX_INTERCEPTED_BYTES = 64 * 1024;

/**
 * Relays one plain request and its answer, streaming both bodies without buffering. The
 * exchange ends in exactly one of: the answer relayed whole, a refusal (`refuse`, nothing
 * was sent yet), nothing sent (`unreachable`, `intercepted`: the caller answers) or a
 * destroyed response. The client going away aborts the upstream request; so does a cut.
 * Resolves as soon as the outcome is known, never rejects.
 */
export function relayRequest(
  req: IncomingMessage,
  res: ServerResponse,
  upstream: Upstream,
  options: RequestRelayOptions,
): Promise<RelayOutcome> {
  return new Promise((resolve) => new RequestRelay(req, res, upstream, options, resolve).start());
}

class RequestRelay {
  readonly #req: IncomingMessage;
  readonly #res: ServerResponse;
  readonly #target: Upstream;
  readonly #options: RequestRelayOptions;
  readonly #resolve: (outcome: RelayOutcome) => void;
  readonly #hasBody: boolean;
  #upstream: ClientRequest | undefined;
  #settled = false;
  #untrack: () => void = () => {};

  constructor(
    req: IncomingMessage,
    res: ServerResponse,
    upstream: Upstream,
    options: RequestRelayOptions,
    resolve: (outcome: RelayOutcome) => void,
  ) {
    this.#req = req;
    this.#res = res;
    this.#options = options;
    this.#resolve = resolve;
    const { body } = options;
    this.#hasBody = body
      ? body.length > 0
      : req.headers["transfer-encoding"] !== undefined ||
        (req.headers["content-length"] !== undefined && req.headers["content-length"] !== "0");
    this.#target = body ? { ...upstream, headers: withLength(upstream, body.length) } : upstream;
  }

  start(): void {
    const res = this.#res;
    // Small writes (a head, then a short body) go out at once: Nagle's algorithm would hold
    // the second one for the peer's delayed ACK, tens of ms per exchange.
    this.#req.socket.setNoDelay(true);
    this.#untrack = this.#options.track?.((why) => this.#cut(why)) ?? (() => {});
    this.#req.on("error", () => this.#upstream?.destroy());
    res.on("error", () => this.#upstream?.destroy());
    res.once("finish", () => this.#settle("ok", res.statusCode));
    res.once("close", () => {
      if (res.writableFinished) return;
      if (!this.#settle("client_closed", res.headersSent ? res.statusCode : undefined)) return;
      this.#upstream?.destroy();
      this.#resolve({ kind: "ended" });
    });
    this.#attempt(1);
  }

  /** Ends the exchange once; false when it already was. */
  #settle(outcome: string, status: number | undefined): boolean {
    if (this.#settled) return false;
    this.#settled = true;
    this.#untrack();
    const req = this.#req;
    // Whatever of the request body is left goes nowhere: stop sending, drain it.
    req.unpipe();
    if (this.#upstream && !this.#upstream.writableFinished) this.#upstream.destroy();
    if (!req.readableEnded) req.resume();
    this.#options.observer?.ended(outcome, status);
    return true;
  }

  /** `tunnel`: the fallback's connection, tried once. */
  #attempt(retries: number, tunnel?: Socket): void {
    const sent = upstreamRequest(this.#target, this.#req.method, this.#options, tunnel);
    this.#upstream = sent.request;
    let answered = false;
    let errored = false;
    sent.request.on("response", (answer: IncomingMessage) => {
      answered = true;
      this.#answered(answer);
    });
    sent.request.on("error", (err) => {
      errored = true;
      if (this.#settled) return;
      const reset = errorCode(err) === "ECONNRESET" || errorCode(err) === "EPIPE";
      if (!answered && !this.#hasBody && retries > 0 && sent.request.reusedSocket && reset) {
        // A pooled connection the upstream closed just as it was reused; nothing was consumed.
        this.#attempt(retries - 1);
        return;
      }
      // (No body was read yet: it flows once connected.)
      const retried =
        !tunnel &&
        viaFallback(this.#options.fallback, err, sent.connected(), {
          settled: () => this.#settled,
          retry: (socket) => this.#attempt(0, socket),
          fail: () => this.#fail(err, false),
        });
      if (!retried) this.#fail(err, sent.connected());
    });
    // Closed with neither an answer nor an error: an upstream that switched protocols for a
    // request that asked for none (Node's client drops that socket silently).
    sent.request.once("close", () => {
      if (answered || errored || this.#settled || this.#upstream !== sent.request) return;
      const err: NodeJS.ErrnoException = new Error("the upstream closed without an answer");
      err.code = BAD_HEAD;
      this.#fail(err, sent.connected());
    });
    if (this.#options.body) sent.request.end(this.#options.body);
    else if (!this.#hasBody) sent.request.end();
    // The body flows once connected: a refused connection has consumed none of it.
    else onConnected(sent.request, () => this.#req.pipe(sent.request));
  }

  #answered(answer: IncomingMessage): void {
    const res = this.#res;
    if (this.#settled) {
      answer.destroy();
      return;
    }
    const status = answer.statusCode ?? 502;
    if (this.#options.intercept?.(status)) {
      readWhole(answer, MAX_INTERCEPTED_BYTES)
        .catch(() => Buffer.alloc(0))
        .then((body) => {
          if (this.#settle("intercepted", status)) {
            const retryAfter = answer.headers["retry-after"];
            this.#resolve({ kind: "intercepted", status, body, retryAfter });
          }
        });
      return;
    }
    const extra = this.#options.responseHeaders ?? [];
    try {
      res.writeHead(status, answer.statusMessage, [
        ...relayResponseHeaders(answer.rawHeaders),
        ...extra,
      ]);
    } catch (err) {
      // A head Node refuses to send (a status out of range, say): the upstream's fault.
      answer.destroy();
      this.#unanswered("bad_upstream_head", Object.assign(toError(err), { code: BAD_HEAD }), true);
      return;
    }
    answer.on("error", () => res.destroy());
    answer.once("close", () => {
      // The upstream connection broke mid-body: the client must not see a clean end.
      if (!answer.complete) res.destroy();
    });
    // Headers go at once: a server-streaming response may not write for a while.
    res.flushHeaders();
    answer.pipe(res);
    this.#resolve({ kind: "relayed", status });
  }

  #fail(err: Error, connected: boolean): void {
    if (this.#settled) return;
    const res = this.#res;
    const status = res.headersSent ? res.statusCode : undefined;
    this.#options.observer?.failed(err, status);
    if (res.headersSent) {
      this.#settle("upstream_error", status);
      res.destroy();
      return;
    }
    this.#unanswered("upstream_error", err, connected);
  }

  /** No answer was relayed: refuse when the caller said how, else leave it the answer. */
  #unanswered(outcome: string, error: Error, connected: boolean): void {
    const refusal = this.#options.refuse?.(error, connected);
    this.#settle(outcome, refusal?.code);
    if (!refusal) {
      this.#resolve({ kind: "unreachable", error, connected });
      return;
    }
    sendError(this.#res, proxyRefusal(refusal));
    this.#resolve({ kind: "ended", status: refusal.code });
  }

  #cut(why: Cut): void {
    const res = this.#res;
    if (!this.#settle(why.outcome, res.headersSent ? res.statusCode : why.refusal.code)) return;
    this.#upstream?.destroy();
    sendError(res, proxyRefusal(why.refusal));
    this.#resolve({ kind: "ended", status: why.refusal.code });
  }
}

/** The upstream's headers for a body of `length` bytes sent whole. */
function withLength(upstream: Upstream, length: number) {
  const { "transfer-encoding": _, ...headers } = upstream.headers;
  return { ...headers, "content-length": String(length) };
}

function toError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}
