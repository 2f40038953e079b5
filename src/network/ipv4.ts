/** IPv4 addresses as unsigned 32-bit numbers, and CIDR blocks over them. */

export interface Ipv4Cidr {
  /** Network address (host bits cleared). */
  readonly address: number;
  /** Prefix length, 0–32. */
  readonly prefix: number;
}

const OCTET = /^(0|[1-9][0-9]{0,2})$/;

/** Parses dotted-quad IPv4 ("10.0.0.1"); undefined when it is not one. Leading zeros are refused. */
export function parseIpv4(text: string): number | undefined {
  const parts = text.split(".");
  if (parts.length !== 4) return undefined;
  let value = 0;
  for (const part of parts) {
    if (!OCTET.test(part)) return undefined;
    const octet = Number(part);
    if (octet > 255) return undefined;
    value = value * 256 + octet;
  }
  return value;
}

export function formatIpv4(value: number): string {
  return [value >>> 24, (value >>> 16) & 255, (value >>> 8) & 255, value & 255].join(".");
}

/** Parses "a.b.c.d/p" or a single address (a /32); undefined when it is neither. */
export function parseCidr(text: string): Ipv4Cidr | undefined {
  const slash = text.indexOf("/");
  const address = parseIpv4(slash === -1 ? text : text.slice(0, slash));
  if (address === undefined) return undefined;
  if (slash === -1) return { address, prefix: 32 };
  const prefixText = text.slice(slash + 1);
  if (!/^(0|[1-9][0-9]?)$/.test(prefixText)) return undefined;
  const prefix = Number(prefixText);
  if (prefix > 32) return undefined;
  return { address: (address & netmask(prefix)) >>> 0, prefix };
}

export function netmask(prefix: number): number {
  return prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
}

export function formatCidr(cidr: Ipv4Cidr): string {
  return `${formatIpv4(cidr.address)}/${cidr.prefix}`;
}

export function cidrContains(cidr: Ipv4Cidr, address: number): boolean {
  return (address & netmask(cidr.prefix)) >>> 0 === cidr.address;
}

/** Whether every address of `inner` is in `outer`. */
export function cidrWithin(inner: Ipv4Cidr, outer: Ipv4Cidr): boolean {
  return inner.prefix >= outer.prefix && cidrContains(outer, inner.address);
}

/** Number of addresses in the block (2^(32 - prefix)). */
export function cidrSize(cidr: Ipv4Cidr): number {
  return 2 ** (32 - cidr.prefix);
}
