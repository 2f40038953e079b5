import type { ServerResponse } from "node:http";
import { toWarrenError } from "../../shared/index.js";

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const payload = JSON.stringify(body);
  res.writeHead(status, {
    "Content-Type": "application/json",
    "Content-Length": Buffer.byteLength(payload),
    "Cache-Control": "no-store",
  });
  res.end(payload);
}

export function sendEmpty(
  res: ServerResponse,
  status: number,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, { "Cache-Control": "no-store", ...headers });
  res.end();
}

/** envd's REST error body: `{code, message}` with `code` equal to the HTTP status. */
export function sendError(res: ServerResponse, err: unknown): void {
  const error = toWarrenError(err);
  if (res.headersSent) {
    res.destroy(error);
    return;
  }
  sendJson(res, error.status, { code: error.status, message: error.message });
}
