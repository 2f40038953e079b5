import {
  type ClientRequest,
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  type ServerResponse,
} from "node:http";
import { Agent, type RequestOptions, request } from "node:https";
import type { Socket } from "node:net";
import { type SecureContext, TLSSocket } from "node:tls";
import type { Logger } from "../../shared/index.js";
import { fillHeaders, type HeaderRule, UnknownSecretError } from "./header-rules.js";

/** What a gate needs to add headers to a sandbox's HTTPS requests (the server gives it). */
export interface GateInterception {
  /** A TLS context whose certificate for `name` sandboxes trust (the node's egress CA). */
  contextFor(name: string): Promise<SecureContext>;
  /** Roots trusted for upstream servers: Node's own when unset. */
  readonly upstreamCa?: readonly string[];
  /** The value of a team's secret, or undefined when the team has none of that name. */
  secretValue(team: string, name: string): Promise<string | undefined>;
}

/** Where an intercepted connection goes: the name the guest asked for, at Warren's address. */
export interface InterceptTarget {
  readonly name: string;
  readonly address: string;
  readonly port: number;
}

export interface InterceptOptions {
  readonly interception: GateInterception;
  /** The rule for the name now (read at each request: a policy update applies at once). */
  readonly rule: () => HeaderRule | undefined;
  /** Whose secrets fill the rule (the sandbox's team), now. */
  readonly team: () => string | undefined;
  /** A guest that has not finished its TLS handshake by then is dropped. Default 10 s. */
  readonly handshakeTimeoutMs?: number;
  readonly logger?: Logger;
}

/** Headers of one hop (RFC 9110 7.6.1): never relayed, each side frames its own. */
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
]);
/** An upstream that does not answer a request's head within this long fails it. */
const UPSTREAM_TIMEOUT_MS = 60_000;
/** A guest that sends no request head within this long is dropped. */
const HEADERS_TIMEOUT_MS = 60_000;
/** A request head at most (the guest's), and a response head (the upstream's). */
const MAX_HEADER_BYTES = 32 * 1024;

/**
 * Serves one guest TLS connection for a name with header rules: terminates its TLS with a
 * certificate of the node's egress CA, reads HTTP/1.1 requests (ALPN offers nothing else),
 * sets the rule's headers — secrets filled in here, never in the guest — and sends each
 * request on to `target` over TLS verified against the name, as any client would. A request
 * for another Host than the name is refused (421): a shared front (a CDN) would route it
 * elsewhere with the rule's headers. Returns what cuts the connection.
 */
export async function interceptTls(
  guest: Socket,
  head: Buffer,
  target: InterceptTarget,
  options: InterceptOptions,
): Promise<{ cut(): void }> {
  const context = await options.interception.contextFor(target.name);
  const agent = new Agent({
    keepAlive: true,
    maxSockets: 8,
    ...(options.interception.upstreamCa && { ca: [...options.interception.upstreamCa] }),
  });
  guest.unshift(head);
  const tlsGuest = new TLSSocket(guest, {
    isServer: true,
    secureContext: context,
    ALPNProtocols: ["http/1.1"],
  });
  // Ended through the TLS socket: it holds the guest's descriptor now.
  tlsGuest.on("error", () => tlsGuest.destroy());
  const handshake = setTimeout(() => tlsGuest.destroy(), options.handshakeTimeoutMs ?? 10_000);
  tlsGuest.once("secure", () => clearTimeout(handshake));
  guest.once("close", () => clearTimeout(handshake));
  const server = createServer(
    { maxHeaderSize: MAX_HEADER_BYTES, requestTimeout: 0, headersTimeout: HEADERS_TIMEOUT_MS },
    (req, res) => void forward(req, res, target, agent, options),
  );
  server.on(
    "upgrade",
    (req: IncomingMessage, socket: Socket, rest: Buffer) =>
      void forwardUpgrade(req, socket, rest, target, options),
  );
  server.on("clientError", (_err, socket) => socket.destroy());
  guest.once("close", () => agent.destroy());
  // The TLS socket reads the guest's socket from here on (the head first): the guest's own
  // stays paused, or it would take bytes the TLS layer needs.
  server.emit("connection", tlsGuest);
  return {
    cut: () => {
      agent.destroy();
      tlsGuest.destroy();
    },
  };
}

/** The request's headers for upstream: the guest's, less hop-by-hop ones, plus the rule's. */
async function upstreamHeaders(
  req: IncomingMessage,
  target: InterceptTarget,
  options: InterceptOptions,
  upgrade: boolean,
): Promise<OutgoingHttpHeaders> {
  const rule = options.rule();
  const team = options.team();
  const filled = rule
    ? await fillHeaders(rule, async (secret) => {
        const value =
          team === undefined ? undefined : await options.interception.secretValue(team, secret);
        if (value === undefined) throw new UnknownSecretError(secret);
        return value;
      })
    : new Map<string, string>();
  const headers: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(req.headers as IncomingHttpHeaders)) {
    if (value === undefined || filled.has(name)) continue;
    if (HOP_BY_HOP.has(name) && !(upgrade && (name === "connection" || name === "upgrade")))
      continue;
    headers[name] = value;
  }
  for (const [name, value] of filled) headers[name] = value;
  if (filled.size > 0) {
    options.logger?.debug(
      { name: target.name, rule: rule?.domain, headers: [...filled.keys()] },
      "egress_gate.headers_set",
    );
  }
  return headers;
}

/** Why a request cannot go upstream, as the guest's client will show it. */
function refuse(res: ServerResponse, status: number, message: string): void {
  if (res.headersSent) return void res.destroy();
  const body = `warren egress: ${message}\n`;
  res.writeHead(status, {
    "content-type": "text/plain; charset=utf-8",
    "content-length": Buffer.byteLength(body),
    "x-warren-egress-error": "1",
  });
  res.end(body);
}

function hostOf(req: IncomingMessage): string {
  return (req.headers.host ?? "").replace(/:\d+$/, "").replace(/\.$/, "").toLowerCase();
}

/** The message for a request that could not be filled in or sent. */
function failure(err: unknown, target: InterceptTarget): { status: number; message: string } {
  if (err instanceof UnknownSecretError) {
    return {
      status: 502,
      message: `the network rule for ${target.name} names secret "${err.secret}", which this sandbox's team does not have (create it: Secret.create)`,
    };
  }
  const code = (err as NodeJS.ErrnoException).code ?? "";
  if (/CERT|SELF_SIGNED|UNABLE_TO_VERIFY|ALTNAME/.test(code)) {
    return {
      status: 502,
      message: `${target.name}'s certificate is not trusted (${code}): the request was not sent`,
    };
  }
  return { status: 502, message: `${target.name}: ${(err as Error).message}` };
}

async function forward(
  req: IncomingMessage,
  res: ServerResponse,
  target: InterceptTarget,
  agent: Agent,
  options: InterceptOptions,
): Promise<void> {
  if (hostOf(req) !== target.name) {
    req.resume();
    return refuse(res, 421, `this connection is for ${target.name}, not "${req.headers.host}"`);
  }
  let headers: OutgoingHttpHeaders;
  try {
    headers = await upstreamHeaders(req, target, options, false);
  } catch (err) {
    req.resume();
    const { status, message } = failure(err, target);
    return refuse(res, status, message);
  }
  const upstream = upstreamRequest(req, target, headers, { agent });
  upstream.on("error", (err) => {
    const { status, message } = failure(err, target);
    refuse(res, status, message);
  });
  upstream.on("response", (answer) => {
    upstream.setTimeout(0);
    const relayed: OutgoingHttpHeaders = {};
    for (const [name, value] of Object.entries(answer.headers)) {
      if (value !== undefined && !HOP_BY_HOP.has(name)) relayed[name] = value;
    }
    res.writeHead(answer.statusCode ?? 502, answer.statusMessage, relayed);
    answer.pipe(res);
    answer.on("error", () => res.destroy());
  });
  res.on("close", () => {
    if (!res.writableFinished) upstream.destroy();
  });
  req.pipe(upstream);
}

/** The guest's request to the upstream at Warren's address, verified for the name it asked. */
function upstreamRequest(
  req: IncomingMessage,
  target: InterceptTarget,
  headers: OutgoingHttpHeaders,
  transport: Pick<RequestOptions, "agent" | "ca">,
): ClientRequest {
  const upstream = request({
    host: target.address,
    port: target.port,
    servername: target.name,
    method: req.method,
    path: req.url,
    headers,
    maxHeaderSize: MAX_HEADER_BYTES,
    timeout: UPSTREAM_TIMEOUT_MS,
    ...transport,
  });
  upstream.on("timeout", () => upstream.destroy(new Error("no answer in time")));
  return upstream;
}

/** An upgrade (WebSocket): the request with the rule's headers, then bytes both ways. */
async function forwardUpgrade(
  req: IncomingMessage,
  socket: Socket,
  rest: Buffer,
  target: InterceptTarget,
  options: InterceptOptions,
): Promise<void> {
  socket.on("error", () => {});
  const answer = (status: number, message: string) => {
    const body = `warren egress: ${message}\n`;
    socket.end(
      `HTTP/1.1 ${status} ${status === 421 ? "Misdirected Request" : "Bad Gateway"}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    );
  };
  if (hostOf(req) !== target.name) {
    return answer(421, `this connection is for ${target.name}, not "${req.headers.host}"`);
  }
  let headers: OutgoingHttpHeaders;
  try {
    headers = await upstreamHeaders(req, target, options, true);
  } catch (err) {
    const { status, message } = failure(err, target);
    return answer(status, message);
  }
  const upstream = upstreamRequest(req, target, headers, {
    // An upgraded socket is the guest's alone: never pooled.
    agent: false,
    ...(options.interception.upstreamCa && { ca: [...options.interception.upstreamCa] }),
  });
  upstream.on("error", (err) => {
    const { status, message } = failure(err, target);
    answer(status, message);
  });
  upstream.on("response", (res) => {
    // Not upgraded: the answer as it is, then the connection ends (it cannot go on as HTTP).
    const lines = [`HTTP/1.1 ${res.statusCode} ${res.statusMessage}`];
    for (let i = 0; i < res.rawHeaders.length; i += 2) {
      const name = res.rawHeaders[i] as string;
      if (!HOP_BY_HOP.has(name.toLowerCase())) lines.push(`${name}: ${res.rawHeaders[i + 1]}`);
    }
    socket.write(`${lines.join("\r\n")}\r\nconnection: close\r\n\r\n`);
    res.pipe(socket);
  });
  upstream.on("upgrade", (res, upSocket, upHead) => {
    upstream.setTimeout(0);
    const lines = [`HTTP/1.1 ${res.statusCode} ${res.statusMessage}`];
    for (let i = 0; i < res.rawHeaders.length; i += 2) {
      lines.push(`${res.rawHeaders[i]}: ${res.rawHeaders[i + 1]}`);
    }
    socket.write(`${lines.join("\r\n")}\r\n\r\n`);
    if (upHead.length) socket.write(upHead);
    if (rest.length) upSocket.write(rest);
    upSocket.on("error", () => socket.destroy());
    socket.on("close", () => upSocket.destroy());
    upSocket.on("close", () => socket.destroy());
    upSocket.pipe(socket);
    socket.pipe(upSocket);
  });
  upstream.end();
}
