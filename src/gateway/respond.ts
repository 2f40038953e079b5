import type { IncomingMessage, ServerResponse } from "node:http";
import { type ErrorAnswer, proxyRefusal, retryAfterSeconds } from "../relay/index.js";
import { readBounded, WarrenError } from "../shared/index.js";

/**
 * Why sandbox traffic was not relayed, as a node's proxy refuses it (E2B's client-proxy):
 * a gone sandbox is E2B's 502 "The sandbox was not found", whatever its node's fate.
 */
export function sandboxRefusal(sandboxId: string, err: unknown): ErrorAnswer {
  if (!(err instanceof WarrenError)) {
    return proxyRefusal({ sandboxId, message: "Internal proxy error", code: 500 });
  }
  if (err.kind === "not_found") {
    return proxyRefusal({ sandboxId, message: "The sandbox was not found", code: 502 });
  }
  return proxyRefusal({ sandboxId, message: err.message, code: err.status });
}

/** The gateway's own JSON answers, and a node's relayed whole (a list, a fork). */
export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  extraHeaders: Readonly<Record<string, string>> = {},
): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const text = JSON.stringify(body);
  const headers: Record<string, string> = {
    "content-type": "application/json; charset=utf-8",
    "content-length": String(Buffer.byteLength(text)),
    ...extraHeaders,
  };
  const retryAfter = retryAfterSeconds(status);
  if (retryAfter) headers["retry-after"] = retryAfter;
  res.writeHead(status, headers).end(text);
}

/** A request body the gateway reads itself (a create it places, a fork it may split). */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  return readBounded(req, limit, {
    tooLarge: () => new WarrenError("payload_too_large", "request body is too large"),
    drain: true,
  });
}
