import type { IncomingMessage, OutgoingHttpHeaders } from "node:http";
import type { TLSSocket } from "node:tls";

/** Headers that only concern one connection (RFC 9110 7.6.1), never relayed as such. */
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
]);

/**
 * Dropped from requests: `expect` is answered by the server in front (Node sends
 * `100 Continue` itself), the forwarding headers are rebuilt below.
 */
const REBUILT = new Set(["expect", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"]);

function isHopByHop(name: string, listed: ReadonlySet<string>): boolean {
  return HOP_BY_HOP.has(name) || name.startsWith("proxy-") || listed.has(name);
}

/**
 * Names a `Connection` header may never make hop-by-hop: the body's framing, and what the
 * next hop routes by (`Host`, `E2b-Sandbox-*`). A client that listed them would have the
 * relay strip its routing and the next hop take the request for something else (sandbox
 * traffic for an API call).
 */
export function isRoutingHeader(name: string): boolean {
  return name === "content-length" || name === "host" || name.startsWith("e2b-sandbox-");
}

/** Every name the request's `Connection` headers list (lower case). */
function connectionListed(rawHeaders: readonly string[]): string[] {
  const names: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (rawHeaders[i]?.toLowerCase() !== "connection") continue;
    for (const token of (rawHeaders[i + 1] ?? "").split(",")) {
      const name = token.trim().toLowerCase();
      if (name !== "") names.push(name);
    }
  }
  return names;
}

/** Header names a `Connection` header lists: they are hop-by-hop too, routing ones aside. */
function connectionTokens(rawHeaders: readonly string[]): Set<string> {
  return new Set(connectionListed(rawHeaders).filter((name) => !isRoutingHeader(name)));
}

/**
 * The routing headers (`Host`, `E2b-Sandbox-*`) a request's `Connection` header names: no
 * client has a reason to, so a front refuses such a request rather than guess.
 */
export function connectionNamesRouting(rawHeaders: readonly string[]): string[] {
  return connectionListed(rawHeaders).filter(
    (name) => name !== "content-length" && isRoutingHeader(name),
  );
}

/** Who asked, as the `x-forwarded-*` headers say it. */
export interface Forwarding {
  /** The client's address, appended to `x-forwarded-for`. */
  readonly clientAddress: string | undefined;
  /**
   * `http` or `https`, unless the request already carries `x-forwarded-proto`; undefined:
   * none added (a forward proxy's way out, not a reverse proxy's).
   */
  readonly proto: string | undefined;
  /** The Host the client used, unless the request already carries `x-forwarded-host`. */
  readonly originalHost: string | undefined;
}

export interface RelayHeaderOptions extends Forwarding {
  /** The Host to send instead of the client's. Default: the client's, as it sent it. */
  readonly host?: string;
  /** More names (lower case) the upstream must not see, e.g. the proxy's routing headers. */
  readonly drop?: ReadonlySet<string>;
  /** Keep `Upgrade` and send `Connection: upgrade`. */
  readonly upgrade: boolean;
}

/** What a request received on `req`'s connection says of its client. */
export function forwardingOf(req: IncomingMessage): Forwarding {
  return {
    clientAddress: req.socket.remoteAddress,
    proto: (req.socket as Partial<TLSSocket>).encrypted ? "https" : "http",
    originalHost: req.headers.host,
  };
}

/** The request headers to send upstream, from the client's raw headers. */
export function relayRequestHeaders(
  rawHeaders: readonly string[],
  options: RelayHeaderOptions,
): OutgoingHttpHeaders {
  const listed = connectionTokens(rawHeaders);
  const headers: Record<string, string | string[]> = {};
  const forwarded: Record<string, string[]> = {};
  let chunked = false;
  let upgrade: string | undefined;
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = (rawHeaders[i] ?? "").toLowerCase();
    const value = rawHeaders[i + 1] ?? "";
    if (name === "transfer-encoding" && /chunked/i.test(value)) chunked = true;
    if (name === "upgrade") upgrade ??= value;
    if (REBUILT.has(name)) {
      if (name.startsWith("x-forwarded-")) forwarded[name] = [...(forwarded[name] ?? []), value];
      continue;
    }
    if (name === "host" && options.host !== undefined) continue;
    if (options.drop?.has(name) || isHopByHop(name, listed)) continue;
    const existing = headers[name];
    if (existing === undefined) headers[name] = value;
    else if (Array.isArray(existing)) existing.push(value);
    else headers[name] = [existing, value];
  }
  if (options.host !== undefined) headers.host = options.host;
  const chain = [...(forwarded["x-forwarded-for"] ?? [])];
  if (options.clientAddress) chain.push(options.clientAddress);
  if (chain.length > 0) headers["x-forwarded-for"] = chain.join(", ");
  const proto = forwarded["x-forwarded-proto"]?.[0] ?? options.proto;
  if (proto !== undefined) headers["x-forwarded-proto"] = proto;
  const forwardedHost = forwarded["x-forwarded-host"]?.[0] ?? options.originalHost;
  if (forwardedHost !== undefined) headers["x-forwarded-host"] = forwardedHost;
  if (chunked) {
    // Node then frames the body as chunks whatever the method; a length would contradict it.
    headers["transfer-encoding"] = "chunked";
    delete headers["content-length"];
  }
  if (options.upgrade && upgrade !== undefined) {
    headers.connection = "upgrade";
    headers.upgrade = upgrade;
  }
  return headers;
}

/** The response headers to send the client (flat name/value list, case kept). */
export function relayResponseHeaders(rawHeaders: readonly string[]): string[] {
  const listed = connectionTokens(rawHeaders);
  const out: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] ?? "";
    if (isHopByHop(name.toLowerCase(), listed)) continue;
    out.push(name, rawHeaders[i + 1] ?? "");
  }
  return out;
}
