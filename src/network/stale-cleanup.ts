import { readdir } from "node:fs/promises";
import type { RunCommand } from "./command-runner.js";
import { deleteFoundHostRules, findHostRules } from "./host-rules.js";
import { type SlotNames, slotIndexIn } from "./slot-names.js";

/** What cleanupStaleSlots removed. */
export interface StaleCleanupReport {
  readonly netns: readonly string[];
  readonly links: readonly string[];
  readonly hostRules: number;
  /** The slot indexes something was removed of. */
  readonly indexes: readonly number[];
}

/**
 * Removes every slot namespace (`<netnsPrefix><n>`), host veth (`<hostVethPrefix><n>`) and
 * host rule commented `<ruleTag>:<n>` of these names whose index is not in `keep`: what a
 * previous run of the server with the same names (or a crash) left behind. Anything named
 * otherwise (another server's slots, other software's interfaces) is left alone; only one
 * server may use a given set of names on a host.
 */
export async function cleanupStaleSlots(
  run: RunCommand,
  names: SlotNames,
  keep: ReadonlySet<number> = new Set(),
): Promise<StaleCleanupReport> {
  const stale = (prefix: string) => (name: string) => {
    const index = slotIndexIn(prefix, name);
    return index !== undefined && !keep.has(index);
  };
  const netns = (await readdir("/run/netns").catch(() => [])).filter(stale(names.netnsPrefix));
  const links = (await readdir("/sys/class/net")).filter(stale(names.hostVethPrefix));
  if (netns.length + links.length > 0) {
    const batch = [...links.map((l) => `link del ${l}`), ...netns.map((n) => `netns del ${n}`)];
    await run("ip", ["-force", "-batch", "-"], { input: `${batch.join("\n")}\n` });
  }
  const rules = (await findHostRules(run, names.ruleTag)).filter((r) => !keep.has(r.index));
  await deleteFoundHostRules(run, rules);
  const indexes = new Set(rules.map((r) => r.index));
  for (const name of netns) indexes.add(slotIndexIn(names.netnsPrefix, name) as number);
  for (const name of links) indexes.add(slotIndexIn(names.hostVethPrefix, name) as number);
  return { netns, links, hostRules: rules.length, indexes: [...indexes].sort((a, b) => a - b) };
}
