import type { ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import type { ErrorAnswer } from "./error-answer.js";
import { rawResponseHead } from "./raw-response.js";

/** Answers with the error, or destroys the response when its head already went. */
export function sendError(res: ServerResponse, answer: ErrorAnswer): void {
  if (res.headersSent || res.destroyed) {
    res.destroy();
    return;
  }
  const json = JSON.stringify(answer.body);
  res.writeHead(answer.status, {
    ...answer.headers,
    "content-length": Buffer.byteLength(json),
  });
  res.end(json);
}

/** Writes the error as a whole HTTP/1.1 response on a raw socket (an upgrade's), then closes it. */
export function writeSocketError(socket: Duplex, answer: ErrorAnswer): void {
  if (socket.destroyed || !socket.writable) {
    socket.destroy();
    return;
  }
  const json = JSON.stringify(answer.body);
  const headers = Object.entries(answer.headers).flat();
  const head = rawResponseHead(answer.status, undefined, [
    ...headers,
    "content-length",
    String(Buffer.byteLength(json)),
    "connection",
    "close",
  ]);
  socket.end(head + json, () => socket.destroy());
}
