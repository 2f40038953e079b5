import { readdir } from "node:fs/promises";
import type { CommandRunner } from "./command-runner.js";
import { deleteFoundHostRules, findHostRules } from "./host-rules.js";
import { HOST_VETH_PATTERN, SLOT_NETNS_PATTERN } from "./slot-addressing.js";

/** What cleanupStaleSlots removed. */
export interface StaleCleanupReport {
  readonly netns: readonly string[];
  readonly links: readonly string[];
  readonly hostRules: number;
}

/**
 * Removes every slot namespace (`warren-<n>`), host veth (`wv<n>`) and host rule commented
 * `warren:<n>` whose index is not in `keep`: what a previous run of the server (or a crash)
 * left behind. Only one Warren server may manage slots on a host.
 */
export async function cleanupStaleSlots(
  run: CommandRunner,
  keep: ReadonlySet<number> = new Set(),
): Promise<StaleCleanupReport> {
  const stale = (pattern: RegExp) => (name: string) => {
    const index = pattern.exec(name)?.[1];
    return index !== undefined && !keep.has(Number(index));
  };
  const netns = (await readdir("/run/netns").catch(() => [])).filter(stale(SLOT_NETNS_PATTERN));
  const links = (await readdir("/sys/class/net")).filter(stale(HOST_VETH_PATTERN));
  if (netns.length + links.length > 0) {
    const batch = [...links.map((l) => `link del ${l}`), ...netns.map((n) => `netns del ${n}`)];
    await run("ip", ["-force", "-batch", "-"], { input: `${batch.join("\n")}\n` });
  }
  const rules = (await findHostRules(run)).filter((r) => !keep.has(r.index));
  await deleteFoundHostRules(run, rules);
  return { netns, links, hostRules: rules.length };
}
