import {
  Agent as HttpAgent,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  type ServerResponse,
} from "node:http";
import { Agent as HttpsAgent } from "node:https";
import type { Duplex } from "node:stream";
import {
  relayRequest,
  relayRequestHeaders,
  relayUpgrade,
  type Upstream,
  type UpstreamLimits,
} from "../../relay/index.js";
import type { Logger } from "../../shared/index.js";
import { answerRaw, failure, refuse } from "./guest-answers.js";

/** Where a guest connection's requests go: the name it is for, at Warren's address for it. */
export interface GuestHttpTarget {
  readonly name: string;
  readonly address: string;
  readonly port: number;
}

/** How one guest connection's requests reach its target. */
export interface Exchange {
  readonly target: GuestHttpTarget;
  /** The connection's keep-alive pool: one upstream connection, as the guest's own would be. */
  readonly pooled: HttpAgent;
  /** A connection of its own (an upgrade's: never pooled). */
  fresh(): HttpAgent | undefined;
  readonly protocol: "http:" | "https:";
  readonly limits: UpstreamLimits;
  /** Headers to set on each request (a rule's, secrets filled), read at each; may throw. */
  readonly setHeaders?: () => Promise<ReadonlyMap<string, string>>;
  readonly logger?: Logger;
}

/**
 * Agents for `target`: plain HTTP, or TLS verified for the name whatever a request's Host
 * says (an agent's servername wins over the one Node derives from Host), Node's roots plus
 * `ca`.
 */
export function agentsFor(
  target: GuestHttpTarget,
  tls: { readonly ca?: readonly string[] } | undefined,
): Pick<Exchange, "pooled" | "fresh" | "protocol"> {
  if (!tls) {
    return {
      pooled: new HttpAgent({ keepAlive: true, maxSockets: 1 }),
      fresh: () => undefined,
      protocol: "http:",
    };
  }
  const options = { servername: target.name, ...(tls.ca && { ca: [...tls.ca] }) };
  return {
    pooled: new HttpsAgent({ ...options, keepAlive: true, maxSockets: 1 }),
    fresh: () => new HttpsAgent(options),
    protocol: "https:",
  };
}

/** A request `refusalOf` let through: its headers set, then relayed by `src/relay`. */
export async function relayGuestRequest(
  req: IncomingMessage,
  res: ServerResponse,
  exchange: Exchange,
): Promise<void> {
  const { name } = exchange.target;
  let headers: OutgoingHttpHeaders;
  try {
    headers = await upstreamHeaders(req, exchange, false);
  } catch (err) {
    return refuse(res, failure(err, name));
  }
  const outcome = await relayRequest(
    req,
    res,
    upstreamOf(req, headers, exchange.pooled, exchange),
    exchange.limits,
  );
  if (outcome.kind === "unreachable") refuse(res, failure(outcome.error, name));
}

/**
 * An upgrade `refusalOf` let through. A WebSocket one is relayed as such: bytes both ways
 * once the upstream answered 101. Any other protocol (h2c above all: its streams each name
 * a host of their own, which a front would route by) is asked for no upgrade: the request
 * goes as a plain one, its answer relayed, then the connection closes.
 */
export async function relayGuestUpgrade(
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
  exchange: Exchange,
): Promise<void> {
  const websocket = /^\s*websocket\s*$/i.test(req.headers.upgrade ?? "");
  let headers: OutgoingHttpHeaders;
  try {
    headers = await upstreamHeaders(req, exchange, websocket);
  } catch (err) {
    return answerRaw(socket, failure(err, exchange.target.name));
  }
  const outcome = await relayUpgrade(
    req,
    socket,
    head,
    upstreamOf(req, headers, exchange.fresh(), exchange),
    exchange.limits,
  );
  if (outcome.kind === "unreachable")
    answerRaw(socket, failure(outcome.error, exchange.target.name));
}

function upstreamOf(
  req: IncomingMessage,
  headers: OutgoingHttpHeaders,
  agent: HttpAgent | undefined,
  exchange: Exchange,
): Upstream {
  return {
    host: exchange.target.address,
    port: exchange.target.port,
    path: req.url as string, // origin-form: refusalOf checked it
    headers,
    protocol: exchange.protocol,
    ...(agent && { agent }),
  };
}

/**
 * The request's headers for upstream: the guest's through relay's filter (hop-by-hop ones
 * dropped, Host as the guest sent it, which refusalOf checked), then the rule's. Relay's
 * forwarding headers are a reverse proxy's: the gate is the guest's way out and adds none.
 */
async function upstreamHeaders(
  req: IncomingMessage,
  exchange: Exchange,
  upgrade: boolean,
): Promise<OutgoingHttpHeaders> {
  const set = (await exchange.setHeaders?.()) ?? new Map<string, string>();
  const headers = relayRequestHeaders(req.rawHeaders, {
    clientAddress: undefined,
    proto: undefined,
    originalHost: undefined,
    upgrade,
  });
  for (const [name, value] of set) headers[name] = value;
  if (set.size > 0) {
    exchange.logger?.debug(
      { name: exchange.target.name, headers: [...set.keys()] },
      "egress_gate.headers_set",
    );
  }
  return headers;
}
