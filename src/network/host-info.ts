import { readFile, writeFile } from "node:fs/promises";
import { networkInterfaces } from "node:os";
import type { CommandRunner } from "./command-runner.js";
import { cidrContains, type Ipv4Cidr, parseIpv4 } from "./ipv4.js";

/**
 * The host's IPv4 addresses outside `exclude` and 127/8 (both are refused as whole blocks).
 * Node lists only interfaces that are up; the host INPUT rule of each slot refuses
 * guest-initiated traffic to any local address anyway, so this list is a second layer.
 */
export function hostIpv4Addresses(exclude: Ipv4Cidr): string[] {
  const out = new Set<string>();
  for (const addresses of Object.values(networkInterfaces())) {
    for (const a of addresses ?? []) {
      if (a.family !== "IPv4") continue;
      const value = parseIpv4(a.address);
      if (value === undefined || value >>> 24 === 127 || cidrContains(exclude, value)) continue;
      out.add(a.address);
    }
  }
  return [...out].sort();
}

/** The interface of the host's IPv4 default route; undefined when there is none. */
export async function defaultRouteInterface(run: CommandRunner): Promise<string | undefined> {
  const { stdout } = await run("ip", ["-j", "-4", "route", "show", "default"]);
  const routes = JSON.parse(stdout || "[]") as { dev?: string }[];
  return routes.find((r) => r.dev)?.dev;
}

const IP_FORWARD = "/proc/sys/net/ipv4/ip_forward";

/** Turns on IPv4 forwarding on the host (needed for any guest egress). True if it changed. */
export async function enableHostForwarding(): Promise<boolean> {
  if ((await readFile(IP_FORWARD, "utf8")).trim() === "1") return false;
  await writeFile(IP_FORWARD, "1\n");
  return true;
}
