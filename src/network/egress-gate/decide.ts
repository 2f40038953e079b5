import { Resolver, resolve4 } from "node:dns/promises";
import { type DomainPattern, matchesDomain } from "../../shared/domain-patterns.js";
import type { EgressPolicy } from "../egress-policy.js";
import { cidrContains, cidrWithin, type Ipv4Cidr, parseCidr, parseIpv4 } from "../ipv4.js";
import type { EgressLimits } from "../netns-rules.js";

/** A guest's new connection as the egress gate sees it. */
export interface GateRequest {
  /** Where the guest sent it (IPv4). */
  readonly destination: string;
  /** The name it is for (SNI, Host), when it named one. */
  readonly name?: string;
}

export type GateVerdict =
  | { readonly allow: true; readonly address: string; readonly by: "domain" | "address" }
  | { readonly allow: false; readonly reason: string };

/** Resolves a name to IPv4 addresses (the node's resolver, or a test's). */
export type Resolve = (name: string) => Promise<readonly string[]>;

/** The host's resolver: what `/etc/resolv.conf` names, A records only. */
export const hostResolve: Resolve = (name) => resolve4(name);

/** A resolver asking one DNS server (`address[:port]`), A records only. */
export function resolverAt(server: string): Resolve {
  const resolver = new Resolver({ timeout: 2_000, tries: 2 });
  resolver.setServers([server]);
  return (name) => resolver.resolve4(name);
}

/**
 * Where a connection may go. A name the domain list allows goes to what **Warren** resolves
 * it to (never to the address the guest picked: a guest could name an allowed host and
 * connect anywhere), the first address no limit refuses — domain entries beat `denyOut` and
 * `allowInternet: false`, never the host's, the slots' or the never-ranges, and a private
 * range or LAN only where an `allowOut` address names it. Anything else is judged by its
 * destination address, as the slot's egress chain judges packets.
 */
export async function decide(
  request: GateRequest,
  policy: EgressPolicy,
  domains: readonly DomainPattern[],
  limits: EgressLimits,
  resolve: Resolve,
): Promise<GateVerdict> {
  if (request.name !== undefined && matchesDomain(request.name, domains)) {
    const addresses = await resolve(request.name).catch(() => [] as readonly string[]);
    const reachable = addresses.find((a) => limitsAllow(a, policy, limits));
    if (reachable) return { allow: true, address: reachable, by: "domain" };
    return {
      allow: false,
      reason: addresses.length
        ? `${request.name} resolves to no address a sandbox may reach`
        : `${request.name} does not resolve`,
    };
  }
  if (addressAllowed(request.destination, policy, limits)) {
    return { allow: true, address: request.destination, by: "address" };
  }
  return {
    allow: false,
    reason:
      request.name === undefined
        ? `${request.destination} is not allowed`
        : `${request.name} (${request.destination}) is not allowed`,
  };
}

/**
 * Where a connection for a name with header rules goes: to what **Warren** resolves the name
 * to, the first address the policy allows — by a domain entry (within the limits), or by
 * address as the egress chain would. Never the guest's pick: the rule's secrets go only to a
 * server Warren found for the name (and whose certificate proves it, intercept.ts).
 */
export async function decideRuled(
  name: string,
  policy: EgressPolicy,
  domains: readonly DomainPattern[],
  limits: EgressLimits,
  resolve: Resolve,
): Promise<GateVerdict> {
  const byDomain = matchesDomain(name, domains);
  const addresses = await resolve(name).catch(() => [] as readonly string[]);
  const allowed = (a: string) =>
    byDomain ? limitsAllow(a, policy, limits) : addressAllowed(a, policy, limits);
  const address = addresses.find(allowed);
  if (address) return { allow: true, address, by: byDomain ? "domain" : "address" };
  return {
    allow: false,
    reason: addresses.length
      ? `${name} resolves to no address this sandbox may reach`
      : `${name} does not resolve`,
  };
}

/**
 * The egress chain's verdict for an address (netns-rules.ts `egressChainRules`, same order):
 * never-ranges and the host, allowOut naming a restricted range, restricted ranges, other
 * allowOut entries, denyOut, then allowInternet.
 */
export function addressAllowed(
  address: string,
  policy: EgressPolicy,
  limits: EgressLimits,
): boolean {
  const ip = parseIpv4(address);
  if (ip === undefined) return false;
  const inAny = (list: readonly string[]) => list.some((c) => cidrContains(cidr(c), ip));
  if (inAny(limits.never)) return false;
  const restricted = limits.restricted.map(cidr);
  const namesRestricted = (entry: string) => restricted.some((r) => cidrWithin(cidr(entry), r));
  if (inAny(policy.allowOut.filter(namesRestricted))) return true;
  if (restricted.some((r) => cidrContains(r, ip))) return false;
  if (inAny(policy.allowOut)) return true;
  if (inAny(policy.denyOut)) return false;
  return policy.allowInternet;
}

/** What no domain entry opens: the never-ranges, and a restricted range no allowOut names. */
export function limitsAllow(address: string, policy: EgressPolicy, limits: EgressLimits): boolean {
  return addressAllowed(address, { ...policy, allowInternet: true, denyOut: [] }, limits);
}

function cidr(text: string): Ipv4Cidr {
  const parsed = parseCidr(text);
  if (!parsed) throw new Error(`not an IPv4 CIDR: ${text}`);
  return parsed;
}
