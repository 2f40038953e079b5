import type { ServerResponse } from "node:http";
import { STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";

/** E2B's proxy error body (`packages/shared/pkg/proxy/template`). */
export interface ProxyErrorBody {
  /** Absent when the request named no valid sandbox. */
  readonly sandboxId?: string;
  readonly message: string;
  /** The HTTP status, repeated. */
  readonly code: number;
}

/**
 * Answers with the JSON error body, or destroys the response when headers already went.
 * Readable from any origin: the SDK in a web page then sees why ("port not open", "not
 * found") rather than an opaque CORS failure; the body holds nothing but the refusal.
 */
export function sendError(res: ServerResponse, body: ProxyErrorBody): void {
  if (res.headersSent || res.destroyed) {
    res.destroy();
    return;
  }
  const json = JSON.stringify(body);
  res.writeHead(body.code, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(json),
    "access-control-allow-origin": "*",
  });
  res.end(json);
}

/** Writes the JSON error as a whole HTTP/1.1 response on a raw socket, then closes it. */
export function writeSocketError(socket: Duplex, body: ProxyErrorBody): void {
  if (socket.destroyed || !socket.writable) {
    socket.destroy();
    return;
  }
  const json = JSON.stringify(body);
  const head = rawResponseHead(body.code, undefined, [
    "content-type",
    "application/json",
    "content-length",
    String(Buffer.byteLength(json)),
    "connection",
    "close",
  ]);
  socket.end(head + json, () => socket.destroy());
}

/** `HTTP/1.1 <status> <reason>` and the flat name/value list, up to the empty line. */
export function rawResponseHead(
  status: number,
  statusMessage: string | undefined,
  rawHeaders: readonly string[],
): string {
  const reason = statusMessage || STATUS_CODES[status] || "";
  let head = `HTTP/1.1 ${status} ${reason}\r\n`;
  for (let i = 0; i + 1 < rawHeaders.length; i += 2)
    head += `${rawHeaders[i]}: ${rawHeaders[i + 1]}\r\n`;
  return `${head}\r\n`;
}
