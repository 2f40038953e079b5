import type { ClientRequest, IncomingMessage } from "node:http";
import { Socket } from "node:net";
import type { Duplex } from "node:stream";
import { proxyRefusal } from "./error-answer.js";
import { relayResponseHeaders } from "./headers.js";
import { rawResponseHead } from "./raw-response.js";
import type { RelayOptions, RelayOutcome } from "./relay-options.js";
import { writeSocketError } from "./send-error.js";
import { type Upstream, upstreamRequest, viaFallback } from "./upstream.js";

/**
 * Relays an Upgrade request (WebSocket or any other protocol). Once the upstream answers
 * 101, its head goes to the client and the two sockets are piped both ways; an end on one
 * side ends the other, an error, an idle side or a cut destroys both. Any other answer is
 * relayed as a plain response, then the client socket is closed. A failure before any
 * answer is refused on the socket (`refuse`) or left to the caller (`unreachable`).
 * Resolves as soon as the outcome is known, never rejects.
 */
export function relayUpgrade(
  req: IncomingMessage,
  client: Duplex,
  head: Buffer,
  upstream: Upstream,
  options: RelayOptions,
): Promise<RelayOutcome> {
  return new Promise((resolve) => {
    new UpgradeRelay(req, client, head, upstream, options, resolve).start();
  });
}

class UpgradeRelay {
  readonly #req: IncomingMessage;
  readonly #client: Duplex;
  readonly #head: Buffer;
  readonly #target: Upstream;
  readonly #options: RelayOptions;
  readonly #resolve: (outcome: RelayOutcome) => void;
  #request: ClientRequest | undefined;
  /** The upstream's socket once it switched protocols. */
  #switched: Duplex | undefined;
  /** The upstream's answer when it declined to switch. */
  #declined: IncomingMessage | undefined;
  #settled = false;
  #untrack: () => void = () => {};

  constructor(
    req: IncomingMessage,
    client: Duplex,
    head: Buffer,
    upstream: Upstream,
    options: RelayOptions,
    resolve: (outcome: RelayOutcome) => void,
  ) {
    this.#req = req;
    this.#client = client;
    this.#head = head;
    this.#target = upstream;
    this.#options = options;
    this.#resolve = resolve;
  }

  start(): void {
    this.#untrack =
      this.#options.track?.((why) => this.#settle(why.outcome, undefined)) ?? (() => {});
    this.#client.on("error", () => this.#settle("client_error", undefined));
    this.#client.once("close", () => this.#settle("client_closed", undefined));
    this.#attempt();
  }

  /** Ends the exchange once: `graceful` lets what was written go out first. */
  #settle(outcome: string, status: number | undefined, graceful = false): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#untrack();
    // After a 101 the upstream socket belongs to us, no longer to the request.
    if (!this.#switched && !this.#declined) this.#request?.destroy();
    if (graceful) {
      closeGracefully(this.#client);
      if (this.#switched) closeGracefully(this.#switched);
    } else {
      this.#client.destroy();
      this.#switched?.destroy();
      this.#declined?.destroy();
    }
    this.#options.observer?.ended(outcome, status);
    this.#resolve({ kind: "ended" });
  }

  /** `tunnel`: the fallback's connection, tried once. */
  #attempt(tunnel?: Socket): void {
    const sent = upstreamRequest(this.#target, this.#req.method, this.#options, tunnel);
    this.#request = sent.request;
    sent.request.on("upgrade", (answer: IncomingMessage, socket: Duplex, upstreamHead: Buffer) => {
      // From here the sockets' own idle timeouts apply, not the request's.
      sent.request.setTimeout(0);
      this.#switch(answer, socket, upstreamHead);
    });
    sent.request.on("response", (answer: IncomingMessage) => this.#decline(answer));
    sent.request.on("error", (err) => {
      if (this.#settled) return;
      // Once an answer started, the client gets no second one: just close.
      if (this.#switched || this.#declined) {
        this.#settle("upstream_error", this.#declined?.statusCode ?? 101);
        return;
      }
      const retried =
        !tunnel &&
        viaFallback(this.#options.fallback, err, sent.connected(), {
          settled: () => this.#settled,
          retry: (socket) => this.#attempt(socket),
          fail: () => this.#fail(err, false),
        });
      if (!retried) this.#fail(err, sent.connected());
    });
    sent.request.end();
  }

  #switch(answer: IncomingMessage, socket: Duplex, upstreamHead: Buffer): void {
    const client = this.#client;
    this.#switched = socket;
    socket.on("error", () => this.#settle("upstream_error", 101));
    if (this.#settled) {
      socket.destroy();
      return;
    }
    socket.once("close", () => {
      // Give the client what the upstream sent before it closed, then close.
      if (!this.#settled) setImmediate(() => this.#settle("upstream_closed", 101, true));
    });
    client.write(rawResponseHead(101, answer.statusMessage, answer.rawHeaders));
    if (upstreamHead.length > 0) client.write(upstreamHead);
    if (this.#head.length > 0) socket.write(this.#head);
    for (const side of [client, socket]) {
      if (side instanceof Socket) {
        side.setNoDelay(true);
        side.setTimeout(this.#options.idleTimeoutMs, () => this.#settle("idle_timeout", 101));
      }
    }
    socket.pipe(client);
    client.pipe(socket);
    this.#options.observer?.upgraded?.();
    this.#resolve({ kind: "relayed", status: 101 });
  }

  /** The upstream declined to switch: relay its answer, delimited by closing the socket. */
  #decline(answer: IncomingMessage): void {
    if (this.#settled) {
      answer.destroy();
      return;
    }
    this.#declined = answer;
    const status = answer.statusCode ?? 502;
    const headers = relayResponseHeaders(answer.rawHeaders);
    headers.push("connection", "close");
    this.#client.write(rawResponseHead(status, answer.statusMessage, headers));
    answer.on("error", () => this.#settle("upstream_error", status));
    answer.once("close", () => {
      if (!answer.complete) this.#settle("upstream_error", status);
    });
    answer.once("end", () => this.#settle("refused_upgrade", status, true));
    answer.pipe(this.#client, { end: false });
    this.#resolve({ kind: "relayed", status });
  }

  /** No answer came: refuse on the socket when the caller said how, else leave it the answer. */
  #fail(err: Error, connected: boolean): void {
    if (this.#settled) return;
    this.#options.observer?.failed(err, undefined);
    const refusal = this.#options.refuse?.(err, connected);
    this.#settled = true;
    this.#untrack();
    this.#options.observer?.ended("upstream_error", refusal?.code);
    if (!refusal) {
      this.#resolve({ kind: "unreachable", error: err, connected });
      return;
    }
    writeSocketError(this.#client, proxyRefusal(refusal));
    this.#resolve({ kind: "ended", status: refusal.code });
  }
}

/** Ends our side, then releases the socket once what was written has gone out. */
function closeGracefully(socket: Duplex): void {
  if (socket.destroyed) return;
  socket.end(() => socket.destroy());
}
