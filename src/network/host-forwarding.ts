import { readFile, writeFile } from "node:fs/promises";
import type { RunCommand } from "./command-runner.js";
import { type HostRule, hostRuleExists, insertHostRules } from "./host-rules.js";

// IPv4 forwarding on the host, interface by interface. Linux decides whether to forward a
// packet by the interface it came in on (`net.ipv4.conf.<if>.forwarding`); the global
// `net.ipv4.ip_forward` only sets that flag on every interface at once, which would make the
// host a router between all of them (eth0 ↔ docker0, LAN ↔ VPN). So Warren never writes the
// global flag: it turns forwarding on for its slots' host veths (guest traffic going out),
// and for the egress interface (the replies coming back), where a guard keeps that from
// opening anything else.

/** Comment of the guard rule; one per egress interface, shared by every Warren pool. */
export const FORWARDING_GUARD_COMMENT = "warren-forwarding";

/**
 * The guard of an egress interface whose forwarding Warren turned on: of the packets that
 * come in on it, only replies on masqueraded connections (slots' egress) are forwarded.
 * What would be forwarded from it to any other interface (a LAN host using this machine as
 * a router, or reaching docker0) is dropped. It names no pool, so it serves every Warren
 * pool on the interface and survives each pool's stale cleanup: it is the record that the
 * forwarding was Warren's, and lasts as long as that setting (until reboot).
 */
export function forwardingGuard(egressInterface: string): HostRule {
  return {
    table: "filter",
    chain: "FORWARD",
    spec: [
      "-i",
      egressInterface,
      "-m",
      "conntrack",
      "!",
      "--ctstate",
      "SNAT",
      "-m",
      "comment",
      "--comment",
      FORWARDING_GUARD_COMMENT,
      "-j",
      "DROP",
    ],
  };
}

function forwardingPath(iface: string): string {
  return `/proc/sys/net/ipv4/conf/${iface}/forwarding`;
}

/** Whether packets received on `iface` may be forwarded; undefined if there is no such interface. */
export async function forwardingOn(iface: string): Promise<boolean | undefined> {
  try {
    return (await readFile(forwardingPath(iface), "utf8")).trim() !== "0";
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}

/** Lets packets received on `iface` (a slot's host veth) be forwarded. */
export async function enableForwarding(iface: string): Promise<void> {
  await writeFile(forwardingPath(iface), "1\n");
}

/**
 * Makes sure replies coming in on the egress interface reach the slots: turns its
 * forwarding on if it was off, guard first (so it never forwards unguarded). Returns
 * "enabled" when it did, "already" when forwarding was on (Warren's from an earlier start,
 * or the host's own choice: then nothing is added), "missing" when there is no such
 * interface (yet).
 */
export async function enableEgressForwarding(
  run: RunCommand,
  egressInterface: string,
): Promise<"enabled" | "already" | "missing"> {
  const on = await forwardingOn(egressInterface);
  if (on === undefined) return "missing";
  if (on) return "already";
  const guard = forwardingGuard(egressInterface);
  if (!(await hostRuleExists(run, guard))) await insertHostRules(run, [guard]);
  await enableForwarding(egressInterface);
  return "enabled";
}
