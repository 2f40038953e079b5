import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from "node:dns";
import { isIPv4 } from "node:net";

/**
 * Which addresses are public destinations: what a tenant-named host (an image registry, a
 * webhook's receiver) must resolve to, unless the operator listed it. RFC 6890's
 * special-purpose ranges, IPv4-mapped and NAT64 addresses by their IPv4 address.
 */

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

/** Why a lookup refused a name: it resolved to `address`, a non-public one of `kind`. */
export type NonPublicRefusal = (hostname: string, address: string, kind: string) => Error;

/**
 * A DNS lookup for a connection that fails (with `refuse`'s error) when any address of the
 * name is not public: the check is the connection's own lookup, so a name cannot answer a
 * public address for the check and a private one for the connection.
 */
export function publicOnlyLookup(refuse: NonPublicRefusal): typeof dnsLookup {
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
          if (kind) return callback(refuse(hostname, address, kind), []);
        }
        if (options.all) return callback(null, addresses);
        const first = addresses[0] as LookupAddress;
        callback(null, first.address, first.family);
      },
    );
  };
  return lookup as unknown as typeof dnsLookup;
}

/** "an" or "a", for a kind in a message ("a private address", "an IETF protocol address"). */
export const article = (word: string) => (/^[aeiou]/i.test(word) ? "an" : "a");
