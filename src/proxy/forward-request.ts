import type { ClientRequest, IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import {
  durationMs,
  type Exchange,
  errorCode,
  NODE_ORIGIN_RESPONSE_HEADERS,
  onConnected,
  upstreamErrorBody,
  upstreamRequest,
  viaLoopback,
} from "./exchange.js";
import { downstreamResponseHeaders } from "./headers.js";
import { sendError } from "./respond.js";

/**
 * Forwards one plain request and streams both bodies without buffering. Ends in exactly one
 * of: the response finished, a JSON error (nothing was sent yet), or a destroyed response.
 * The client going away aborts the upstream request; so does the sandbox stopping.
 */
export function forwardRequest(
  exchange: Exchange,
  req: IncomingMessage,
  res: ServerResponse,
): void {
  const { sandboxId, port, logger } = exchange;
  const hasBody =
    req.headers["transfer-encoding"] !== undefined ||
    (req.headers["content-length"] !== undefined && req.headers["content-length"] !== "0");
  let upstream: ClientRequest | undefined;
  let settled = false;

  const settle = (outcome: string, status?: number): boolean => {
    if (settled) return false;
    settled = true;
    untrack();
    // Whatever of the request body is left goes nowhere: stop sending, drain it.
    req.unpipe();
    if (upstream && !upstream.writableFinished) upstream.destroy();
    if (!req.readableEnded) req.resume();
    const fields = { sandboxId, port, method: req.method, status, outcome };
    logger.debug({ ...fields, durationMs: durationMs(exchange.started) }, "proxy.request");
    return true;
  };
  const untrack = exchange.track(() => {
    if (!settle("sandbox_stopped", res.headersSent ? res.statusCode : 502)) return;
    upstream?.destroy();
    sendError(res, { sandboxId, message: "The sandbox was not found", code: 502 });
  });

  req.on("error", () => upstream?.destroy());
  res.on("error", () => upstream?.destroy());
  res.once("finish", () => settle("ok", res.statusCode));
  res.once("close", () => {
    if (res.writableFinished) return;
    settle("client_closed", res.headersSent ? res.statusCode : undefined);
    upstream?.destroy();
  });

  /** `tunnel`: a connection to the port on the guest's loopback (openLoopbackTunnel). */
  const attempt = (retries: number, tunnel?: Socket): void => {
    const { request: proxyReq, connected } = upstreamRequest(exchange, req.method, tunnel);
    upstream = proxyReq;
    let answered = false;
    proxyReq.on("response", (proxyRes) => {
      answered = true;
      if (settled) {
        proxyRes.destroy();
        return;
      }
      try {
        res.writeHead(
          proxyRes.statusCode ?? 502,
          proxyRes.statusMessage,
          exchange.onNodeOrigin
            ? [...downstreamResponseHeaders(proxyRes.rawHeaders), ...NODE_ORIGIN_RESPONSE_HEADERS]
            : downstreamResponseHeaders(proxyRes.rawHeaders),
        );
      } catch {
        // A head Node refuses to send (a status out of range, say): the sandbox's fault.
        proxyRes.destroy();
        settle("bad_upstream_head", 502);
        const message = `The sandbox's server on port ${port} sent a response that cannot be relayed`;
        sendError(res, { sandboxId, message, code: 502 });
        return;
      }
      proxyRes.on("error", () => res.destroy());
      proxyRes.once("close", () => {
        // The upstream connection broke mid-body: the client must not see a clean end.
        if (!proxyRes.complete) res.destroy();
      });
      // Headers go at once: a server-streaming response may not write for a while.
      res.flushHeaders();
      proxyRes.pipe(res);
    });
    proxyReq.on("error", (err) => {
      if (settled) return;
      const reset = errorCode(err) === "ECONNRESET" || errorCode(err) === "EPIPE";
      if (!answered && !hasBody && retries > 0 && proxyReq.reusedSocket && reset) {
        // A pooled connection the sandbox closed just as it was reused; nothing was consumed.
        attempt(retries - 1);
        return;
      }
      // (No body was read yet: it flows once connected.)
      const retried =
        !tunnel &&
        viaLoopback(exchange, err, connected(), {
          settled: () => settled,
          retry: (socket) => attempt(0, socket),
          fail: () => fail(err, false),
        });
      if (retried) return;
      fail(err, connected());
    });
    if (!hasBody) proxyReq.end();
    // The body flows once connected: a refused connection has consumed none of it.
    else onConnected(proxyReq, () => req.pipe(proxyReq));
  };

  const fail = (err: Error, connected: boolean): void => {
    if (settled) return;
    const status = res.headersSent ? res.statusCode : undefined;
    logger.warn(
      {
        sandboxId,
        port,
        method: req.method,
        status,
        code: errorCode(err),
        err: err.message,
        durationMs: durationMs(exchange.started),
      },
      "proxy.upstream_error",
    );
    if (res.headersSent) {
      settle("upstream_error", status);
      res.destroy();
      return;
    }
    const body = upstreamErrorBody(exchange, err, connected);
    settle("upstream_error", body.code);
    sendError(res, body);
  };
  attempt(1);
}
