import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from "node:dns";
import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import { isIP, isIPv4 } from "node:net";
import { WarrenError } from "../shared/index.js";

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
  return trusted || literal ? undefined : publicOnlyLookup(role, host);
}

/** A DNS lookup for the connection that fails when any address of the name is not public. */
function publicOnlyLookup(role: string, host: string): typeof dnsLookup {
  const lookup = (
    hostname: string,
    options: LookupOptions,
    callback: (err: Error | null, address: string | LookupAddress[], family?: number) => void,
  ): void => {
    dnsLookup(
      hostname,
      { ...options, all: true },
      (err: Error | null, addresses: LookupAddress[]) => {
        if (err) return callback(err, []);
        for (const { address } of addresses) {
          const kind = nonPublicAddress(address);
          if (kind) {
            return callback(
              refusal(
                role,
                host,
                `${hostname} resolves to ${address}, ${article(kind)} ${kind} address`,
              ),
              [],
            );
          }
        }
        if (options.all) return callback(null, addresses);
        const first = addresses[0] as LookupAddress;
        callback(null, first.address, first.family);
      },
    );
  };
  return lookup as unknown as typeof dnsLookup;
}

function refusal(role: string, host: string, why: string): WarrenError {
  return new WarrenError(
    "image_pull_failed",
    `the ${role} ${host} is refused: ${why}. Image pulls reach only public addresses, unless the operator lists ${host} in WARREN_PRIVATE_REGISTRIES (or as a mirror or insecure registry)`,
  );
}

const article = (word: string) => (/^[aeiou]/.test(word) ? "an" : "a");

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

interface Range {
  readonly bytes: readonly number[];
  readonly bits: number;
  readonly kind: string;
}

const v4 = (cidr: string, kind: string): Range => {
  const [address, bits] = cidr.split("/") as [string, string];
  return { bytes: address.split(".").map(Number), bits: Number(bits), kind };
};

/** IPv4 ranges that are no public destination (RFC 6890's special-purpose registry). */
const IPV4_RANGES: readonly Range[] = [
  v4("0.0.0.0/8", "unspecified"),
  v4("10.0.0.0/8", "private"),
  v4("100.64.0.0/10", "shared (carrier-grade NAT)"),
  v4("127.0.0.0/8", "loopback"),
  v4("169.254.0.0/16", "link-local"),
  v4("172.16.0.0/12", "private"),
  v4("192.0.0.0/24", "IETF protocol"),
  v4("192.0.2.0/24", "documentation"),
  v4("192.88.99.0/24", "relay (6to4)"),
  v4("192.168.0.0/16", "private"),
  v4("198.18.0.0/15", "benchmarking"),
  v4("198.51.100.0/24", "documentation"),
  v4("203.0.113.0/24", "documentation"),
  v4("224.0.0.0/4", "multicast"),
  v4("240.0.0.0/4", "reserved"),
];

const v6 = (cidr: string, kind: string): Range => {
  const [address, bits] = cidr.split("/") as [string, string];
  return { bytes: ipv6Bytes(address), bits: Number(bits), kind };
};

/** IPv6 ranges that are no public destination (those embedding IPv4 are checked as IPv4). */
const IPV6_RANGES: readonly Range[] = [
  v6("::/128", "unspecified"),
  v6("::1/128", "loopback"),
  v6("::/96", "reserved (IPv4-compatible)"),
  v6("100::/64", "discard"),
  v6("2001::/23", "IETF protocol"),
  v6("2001:db8::/32", "documentation"),
  v6("2002::/16", "relay (6to4)"),
  v6("fc00::/7", "private"),
  v6("fe80::/10", "link-local"),
  v6("fec0::/10", "site-local"),
  v6("ff00::/8", "multicast"),
];
/** IPv4-mapped (`::ffff:a.b.c.d`) and NAT64 (`64:ff9b::a.b.c.d`): the IPv4 address decides. */
const EMBEDDING_IPV4: readonly Range[] = [
  v6("::ffff:0:0/96", "IPv4-mapped"),
  v6("64:ff9b::/96", "NAT64"),
];

function inRange(bytes: readonly number[], range: Range): boolean {
  for (let bit = 0; bit < range.bits; bit += 8) {
    const take = Math.min(8, range.bits - bit);
    const mask = (0xff << (8 - take)) & 0xff;
    const i = bit / 8;
    if (((bytes[i] ?? 0) & mask) !== ((range.bytes[i] ?? 0) & mask)) return false;
  }
  return true;
}

/** The 16 bytes of an IPv6 address (`::`, embedded dotted IPv4 and zone ids allowed). */
function ipv6Bytes(address: string): number[] {
  let text = address.replace(/%.*$/, "");
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text)?.[1];
  if (dotted) {
    const [a, b, c, d] = dotted.split(".").map(Number) as [number, number, number, number];
    text = `${text.slice(0, -dotted.length)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.includes("::") ? (text.split("::") as [string, string]) : [text, ""];
  const groups = (part: string) => (part === "" ? [] : part.split(":").map((g) => parseInt(g, 16)));
  const front = groups(head);
  const back = text.includes("::") ? groups(tail) : [];
  const all = [...front, ...new Array<number>(8 - front.length - back.length).fill(0), ...back];
  return all.flatMap((g) => [(g >> 8) & 0xff, g & 0xff]);
}

/**
 * What kind of non-public address `address` is (`loopback`, `private`, `link-local`, ...),
 * or undefined for a public one.
 */
export function nonPublicAddress(address: string): string | undefined {
  if (isIPv4(address)) {
    const bytes = address.split(".").map(Number);
    return IPV4_RANGES.find((range) => inRange(bytes, range))?.kind;
  }
  const bytes = ipv6Bytes(address);
  if (EMBEDDING_IPV4.some((range) => inRange(bytes, range))) {
    return nonPublicAddress(bytes.slice(12).join("."));
  }
  return IPV6_RANGES.find((range) => inRange(bytes, range))?.kind;
}
