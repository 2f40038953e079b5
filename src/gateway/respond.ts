import type { ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { toWarrenError, type WarrenError } from "../shared/index.js";

/** Seconds a client should wait before retrying, by status (as the node's API says). */
const RETRY_AFTER: Readonly<Record<number, string>> = { 429: "1", 503: "5" };

/** E2B's error JSON, as a node's API answers: `{code, message, error_code, reason}`. */
export function sendApiError(res: ServerResponse, error: unknown): void {
  const err = toWarrenError(error);
  const internal = err.kind === "internal";
  sendJson(res, err.status, {
    code: err.status,
    // A 500's cause is the gateway's to log, not the client's to read.
    message: internal ? "internal error" : err.message,
    error_code: err.kind,
    reason: err.reason,
  });
}

/** The proxy's refusal shape (E2B's client-proxy): `{sandboxId, message, code}`. */
export function sendProxyError(res: ServerResponse, sandboxId: string, err: WarrenError): void {
  sendJson(res, proxyStatus(err), {
    sandboxId,
    message: proxyMessage(err),
    code: proxyStatus(err),
  });
}

/** The same refusal written on an upgrade's raw socket, which is then closed. */
export function writeSocketProxyError(socket: Duplex, sandboxId: string, err: WarrenError): void {
  const status = proxyStatus(err);
  const body = JSON.stringify({ sandboxId, message: proxyMessage(err), code: status });
  socket.end(
    `HTTP/1.1 ${status} Error\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}

/** Gone sandboxes are E2B's 502 "The sandbox was not found", whatever the node's fate. */
function proxyStatus(err: WarrenError): number {
  return err.kind === "not_found" ? 502 : err.status;
}

function proxyMessage(err: WarrenError): string {
  return err.kind === "not_found" ? "The sandbox was not found" : err.message;
}

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
  const retryAfter = RETRY_AFTER[status];
  if (retryAfter) headers["retry-after"] = retryAfter;
  res.writeHead(status, headers).end(text);
}
