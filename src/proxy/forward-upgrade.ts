import type { ClientRequest, IncomingMessage } from "node:http";
import { Socket } from "node:net";
import type { Duplex } from "node:stream";
import {
  durationMs,
  type Exchange,
  errorCode,
  upstreamErrorBody,
  upstreamRequest,
  viaLoopback,
} from "./exchange.js";
import { downstreamResponseHeaders } from "./headers.js";
import { rawResponseHead, writeSocketError } from "./respond.js";

/**
 * Forwards an Upgrade request (WebSocket or any other protocol). Once the upstream answers
 * 101, its head goes to the client and the two sockets are piped both ways; an end on one
 * side ends the other, an error or a sandbox stop destroys both. An upstream refusal (any
 * other status) is relayed as a plain response, then the client socket is closed.
 */
export function forwardUpgrade(
  exchange: Exchange,
  req: IncomingMessage,
  client: Duplex,
  head: Buffer,
): void {
  const { sandboxId, port, logger } = exchange;
  let upstream: Duplex | undefined;
  /** The upstream's answer when it declined to switch protocols. */
  let refusal: IncomingMessage | undefined;
  let settled = false;
  let proxyReq: ClientRequest | undefined;

  const settle = (outcome: string, status: number | undefined, graceful: boolean): void => {
    if (settled) return;
    settled = true;
    untrack();
    // After a 101 the upstream socket belongs to us, no longer to the request.
    if (!upstream && !refusal) proxyReq?.destroy();
    if (graceful) {
      closeGracefully(client);
      if (upstream) closeGracefully(upstream);
    } else {
      client.destroy();
      upstream?.destroy();
      refusal?.destroy();
    }
    const fields = { sandboxId, port, upgrade: req.headers.upgrade, status, outcome };
    logger.debug({ ...fields, durationMs: durationMs(exchange.started) }, "proxy.upgrade");
  };
  const untrack = exchange.track(() => settle("sandbox_stopped", undefined, false));

  client.on("error", () => settle("client_error", undefined, false));
  client.once("close", () => settle("client_closed", undefined, false));

  /** `tunnel`: a connection to the port on the guest's loopback (openLoopbackTunnel). */
  const attempt = (tunnel?: Socket): void => {
    const { request: sent, connected } = upstreamRequest(exchange, req.method, tunnel);
    proxyReq = sent;

    sent.on("upgrade", (proxyRes, socket, upstreamHead) => {
      upstream = socket;
      // From here the sockets' own idle timeouts apply, not the request's.
      sent.setTimeout(0);
      socket.on("error", () => settle("upstream_error", 101, false));
      if (settled) {
        socket.destroy();
        return;
      }
      socket.once("close", () => {
        // Give the client what the upstream sent before it closed, then close.
        if (!settled) setImmediate(() => settle("upstream_closed", 101, true));
      });
      client.write(rawResponseHead(101, proxyRes.statusMessage, proxyRes.rawHeaders));
      if (upstreamHead.length > 0) client.write(upstreamHead);
      if (head.length > 0) socket.write(head);
      for (const side of [client, socket]) {
        if (side instanceof Socket) {
          side.setNoDelay(true);
          side.setTimeout(exchange.idleTimeoutMs, () => settle("idle_timeout", 101, false));
        }
      }
      socket.pipe(client);
      client.pipe(socket);
      logger.debug(
        { sandboxId, port, upgrade: req.headers.upgrade, durationMs: durationMs(exchange.started) },
        "proxy.upgraded",
      );
    });

    sent.on("response", (proxyRes) => {
      // The upstream declined to switch: relay its answer, delimited by closing the socket.
      if (settled) {
        proxyRes.destroy();
        return;
      }
      refusal = proxyRes;
      const headers = downstreamResponseHeaders(proxyRes.rawHeaders);
      headers.push("connection", "close");
      client.write(rawResponseHead(proxyRes.statusCode ?? 502, proxyRes.statusMessage, headers));
      proxyRes.on("error", () => settle("upstream_error", proxyRes.statusCode, false));
      proxyRes.once("close", () => {
        if (!proxyRes.complete) settle("upstream_error", proxyRes.statusCode, false);
      });
      proxyRes.once("end", () => settle("refused_upgrade", proxyRes.statusCode, true));
      proxyRes.pipe(client, { end: false });
    });

    sent.on("error", (err) => {
      if (settled) return;
      // Once an answer started, the client gets no second one: just close.
      if (upstream || refusal) {
        settle("upstream_error", refusal?.statusCode ?? 101, false);
        return;
      }
      const retried =
        !tunnel &&
        viaLoopback(exchange, err, connected(), {
          settled: () => settled,
          retry: attempt,
          fail: () => fail(err, false),
        });
      if (retried) return;
      fail(err, connected());
    });
    sent.end();
  };

  const fail = (err: Error, connected: boolean): void => {
    if (settled) return;
    logger.warn(
      {
        sandboxId,
        port,
        upgrade: req.headers.upgrade,
        code: errorCode(err),
        err: err.message,
        durationMs: durationMs(exchange.started),
      },
      "proxy.upstream_error",
    );
    const body = upstreamErrorBody(exchange, err, connected);
    settled = true;
    untrack();
    writeSocketError(client, body);
  };
  attempt();
}

/** Ends our side, then releases the socket once what was written has gone out. */
function closeGracefully(socket: Duplex): void {
  if (socket.destroyed) return;
  socket.end(() => socket.destroy());
}
