import { networkInterfaces } from "node:os";
import type { RunCommand } from "./command-runner.js";
import { cidrContains, formatCidr, type Ipv4Cidr, parseCidr, parseIpv4 } from "./ipv4.js";
import { type EgressLimits, egressLimits } from "./netns-rules.js";

/** The host's IPv4 addresses, and the networks they are on. */
export interface HostIpv4 {
  /** Every address, e.g. "192.0.2.2". */
  readonly addresses: readonly string[];
  /** Every network an address is on (its LANs), e.g. "192.0.2.0/24". */
  readonly networks: readonly string[];
}

/**
 * The host's IPv4 addresses and networks outside `exclude` (the slots' block) and 127/8
 * (both are refused as whole blocks). Node lists only interfaces that are up; the host INPUT
 * rule of each slot refuses guest-initiated traffic to any local address anyway, so the
 * address list is a second layer.
 */
export function hostIpv4(exclude: Ipv4Cidr): HostIpv4 {
  const addresses = new Set<string>();
  const networks = new Set<string>();
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) {
      if (a.family !== "IPv4") continue;
      const value = parseIpv4(a.address);
      if (value === undefined || value >>> 24 === 127 || cidrContains(exclude, value)) continue;
      addresses.add(a.address);
      const network = a.cidr ? parseCidr(a.cidr) : undefined;
      if (network) networks.add(formatCidr(network));
    }
  }
  return { addresses: [...addresses].sort(), networks: [...networks].sort() };
}

/**
 * What no egress policy opens for slots of `base`, read now: the host's addresses and
 * networks change (DHCP, VPNs, new links).
 */
export function hostEgressLimits(base: Ipv4Cidr): EgressLimits {
  const host = hostIpv4(base);
  return egressLimits(formatCidr(base), host.addresses, host.networks);
}

/** The interface of the host's IPv4 default route; undefined when there is none. */
export async function defaultRouteInterface(run: RunCommand): Promise<string | undefined> {
  const { stdout } = await run("ip", ["-j", "-4", "route", "show", "default"]);
  const routes = JSON.parse(stdout || "[]") as { dev?: string }[];
  return routes.find((r) => r.dev)?.dev;
}
