import type { ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { BAD_HEAD, errorCode, HEAD_TIMEOUT, rawResponseHead } from "../../relay/index.js";
import { SecretHostRefusedError, UnknownSecretError } from "./header-rules.js";
import type { Refusal } from "./request-checks.js";

/**
 * What the gate answers a guest itself: `warren egress: <why>` in plain text, flagged with
 * `x-warren-egress-error: 1`, the connection closed after it (whatever else the guest sent
 * on it is not relayed).
 */
export function refuse(res: ServerResponse, refusal: Refusal): void {
  res.req.resume();
  if (res.headersSent || res.destroyed) return void res.destroy();
  const body = `warren egress: ${refusal.message}\n`;
  res.writeHead(refusal.status, [...headersFor(body), "connection", "close"]);
  res.end(body);
}

/** The same on a socket no `ServerResponse` holds (an upgrade, CONNECT, a head Node refused). */
export function answerRaw(socket: Duplex, refusal: Refusal): void {
  if (socket.destroyed || !socket.writable) return void socket.destroy();
  const body = `warren egress: ${refusal.message}\n`;
  const head = rawResponseHead(refusal.status, undefined, [
    ...headersFor(body),
    "connection",
    "close",
  ]);
  socket.end(head + body, () => socket.destroy());
}

function headersFor(body: string): string[] {
  return [
    "content-type",
    "text/plain; charset=utf-8",
    "content-length",
    String(Buffer.byteLength(body)),
    "x-warren-egress-error",
    "1",
  ];
}

/** Why a request could not be filled in or sent (502), as the guest's client will show it. */
export function failure(err: unknown, name: string): Refusal {
  if (err instanceof SecretHostRefusedError) {
    return {
      status: 502,
      message: `the network rule for ${name} names secret "${err.secret}", which is bound to other hosts (its allowedHosts): the request was not sent`,
    };
  }
  if (err instanceof UnknownSecretError) {
    return {
      status: 502,
      message: `the network rule for ${name} names secret "${err.secret}", which this sandbox's team does not have (create it: Secret.create)`,
    };
  }
  const code = errorCode(err) ?? "";
  if (/CERT|SELF_SIGNED|UNABLE_TO_VERIFY|ALTNAME/.test(code)) {
    return {
      status: 502,
      message: `${name}'s certificate is not trusted (${code}): the request was not sent`,
    };
  }
  if (code === BAD_HEAD) {
    return { status: 502, message: `${name} answered with a head that cannot be relayed` };
  }
  if (code === HEAD_TIMEOUT) return { status: 502, message: `${name}: no answer in time` };
  const message = err instanceof Error ? err.message : String(err);
  return { status: 502, message: `${name}: ${message}` };
}
