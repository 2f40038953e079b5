import type { lookup as dnsLookup } from "node:dns";
import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import { isIP } from "node:net";
import { WarrenError } from "../shared/index.js";
import { article, nonPublicAddress, publicOnlyLookup } from "../shared/public-address.js";

/**
 * HTTP GETs of the registry client, to wherever a caller's image reference, a registry's
 * token realm or a redirect points: a tenant names those, so each destination is checked
 * before anything is sent. Hosts the operator listed (mirrors, insecure and private
 * registries) may be anywhere; every other host must resolve to public addresses only (the
 * check is made by the connection's own DNS lookup, so a name cannot resolve to a public
 * address for the check and a private one for the connection), and be HTTPS.
 */

/** Redirects followed per request (Docker Hub's blobs take one, to its CDN). */
export const MAX_REDIRECTS = 5;

/** Hosts (`host[:port]`, as a URL's `host`) the operator vouched for. */
export interface RegistryDestinations {
  /** May be on any address: loopback, LAN, private. */
  readonly trusted: ReadonlySet<string>;
  /** May be reached over plain HTTP (also trusted). */
  readonly insecure: ReadonlySet<string>;
}

export interface RegistryGetOptions {
  readonly headers: Readonly<Record<string, string>>;
  readonly signal: AbortSignal;
  readonly destinations: RegistryDestinations;
  /** What the first URL is, for messages: "registry", "token realm". */
  readonly role: string;
}

/** A response: its status and headers, and its body (read it, or `destroy` it). */
export interface RegistryAnswer {
  readonly status: number;
  readonly url: URL;
  header(name: string): string | undefined;
  readonly body: AsyncIterable<Buffer>;
  destroy(): void;
}

/**
 * GET `url`, following up to MAX_REDIRECTS redirects, each destination checked as the first
 * (an `Authorization` header is dropped when a redirect leaves the origin, as Docker does).
 */
export async function registryGet(
  url: string,
  options: RegistryGetOptions,
): Promise<RegistryAnswer> {
  let current = new URL(url);
  let role = options.role;
  const headers = { ...options.headers };
  for (let hop = 0; ; hop++) {
    const lookup = checkDestination(current, options.destinations, role);
    const body = await send(current, headers, options.signal, lookup);
    const status = body.statusCode ?? 0;
    const location = body.headers.location;
    if (status >= 300 && status < 400 && status !== 304 && location) {
      body.destroy();
      if (hop >= MAX_REDIRECTS) {
        throw new WarrenError(
          "image_pull_failed",
          `GET ${url}: more than ${MAX_REDIRECTS} redirects (the last to ${location})`,
        );
      }
      const next = new URL(location, current);
      if (next.origin !== current.origin) delete headers.authorization;
      current = next;
      role = "redirect";
      continue;
    }
    return {
      status,
      url: current,
      header: (name) => {
        const value = body.headers[name.toLowerCase()];
        return Array.isArray(value) ? value[0] : value;
      },
      body,
      destroy: () => body.destroy(),
    };
  }
}

type Lookup = typeof dnsLookup | undefined;

/**
 * Throws unless `url` may be fetched; returns the DNS lookup to connect with (undefined when
 * any address will do, or the host is an address already checked).
 */
function checkDestination(url: URL, destinations: RegistryDestinations, role: string): Lookup {
  const host = url.host.toLowerCase();
  const trusted = destinations.trusted.has(host) || destinations.insecure.has(host);
  const hostname = url.hostname.replace(/^\[|\]$/g, "");
  const literal = isIP(hostname) !== 0;
  if (!trusted && literal) {
    const kind = nonPublicAddress(hostname);
    if (kind) throw refusal(role, host, `${hostname} is ${article(kind)} ${kind} address`);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new WarrenError("image_pull_failed", `the ${role} ${url.href} is not http(s)`);
  }
  if (url.protocol === "http:" && !destinations.insecure.has(host)) {
    throw new WarrenError(
      "image_pull_failed",
      `the ${role} ${url.origin} is plain HTTP: registries, token realms and redirects must be HTTPS unless the operator lists ${host} in WARREN_INSECURE_REGISTRIES`,
    );
  }
  if (trusted || literal) return undefined;
  return publicOnlyLookup((hostname, address, kind) =>
    refusal(role, host, `${hostname} resolves to ${address}, ${article(kind)} ${kind} address`),
  );
}

function refusal(role: string, host: string, why: string): WarrenError {
  return new WarrenError(
    "image_pull_failed",
    `the ${role} ${host} is refused: ${why}. Image pulls reach only public addresses, unless the operator lists ${host} in WARREN_PRIVATE_REGISTRIES (or as a mirror or insecure registry)`,
  );
}

function send(
  url: URL,
  headers: Readonly<Record<string, string>>,
  signal: AbortSignal,
  lookup: Lookup,
): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const request = url.protocol === "https:" ? httpsRequest : httpRequest;
    const req = request(url, {
      method: "GET",
      headers,
      signal,
      // One connection per request: no pooled socket outlives the checks made for it.
      agent: false,
      ...(lookup ? { lookup } : {}),
    });
    req.once("response", resolve);
    req.once("error", reject);
    req.end();
  });
}
