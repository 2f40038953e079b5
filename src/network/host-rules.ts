import type { RunCommand } from "./command-runner.js";
import { LINK_LOCAL_RANGE } from "./egress-policy.js";
import { NetworkError } from "./errors.js";
import type { SlotAddresses } from "./slot-addressing.js";

// A slot's rules in the host's own tables. Each carries the comment `<ruleTag>:<index>`
// (`warren:<index>` by default), so a restarted server finds and removes the rules of slots
// it no longer owns, and only its own pool's. Everything else about a slot lives inside its
// namespace and disappears with it.

export interface HostRule {
  readonly table: "filter" | "nat";
  readonly chain: string;
  /** Match and target, without the chain, e.g. ["-i", "wv3", "-j", "DROP"]. */
  readonly spec: readonly string[];
}

export function hostRuleComment(ruleTag: string, index: number): string {
  return `${ruleTag}:${index}`;
}

/**
 * Matches a `<ruleTag>:<n>` comment in `iptables-save` output (quoted or not); group 1 is
 * the index. Anchored at `--comment`, so tag "warren" does not match "xwarren:3".
 */
function commentPattern(ruleTag: string): RegExp {
  const tag = ruleTag.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  return new RegExp(`--comment "?${tag}:([0-9]+)"?(?:\\s|$)`);
}

/** What a slot's host rules depend on besides its addresses. */
export interface HostRuleOptions {
  /** Host interface guest traffic leaves by; undefined: the guest has no way out of the host. */
  readonly egressInterface: string | undefined;
  /** The only local user whose processes may open connections to the slot (the server's). */
  readonly serverUid: number;
}

/** The host rules of one slot, in order. */
export function hostRules(slot: SlotAddresses, options: HostRuleOptions): HostRule[] {
  const veth = slot.hostVeth;
  const out = options.egressInterface;
  const established = "-m conntrack --ctstate ESTABLISHED,RELATED";
  const rules: HostRule[] = [
    // Only the server (its proxy, its envd client) opens connections to the guest: any other
    // local user would bypass the proxy's authentication. Matched on the interface, so every
    // address and port behind it is covered. Packets of connections already tracked are let
    // be: the kernel's own replies (time-wait ACKs, resets) carry no user, and only the
    // server can have opened those connections.
    rule(
      "filter",
      "OUTPUT",
      `-o ${veth} -m conntrack ! --ctstate ESTABLISHED,RELATED -m owner ! --uid-owner ${options.serverUid} -j REJECT --reject-with icmp-admin-prohibited`,
    ),
    // Replies to the host's own connections (envd) come back; nothing the guest starts
    // reaches a local address: any interface's, 127/8, whatever the namespace allows.
    rule("filter", "INPUT", `-i ${veth} ${established} -j ACCEPT`),
    rule("filter", "INPUT", `-i ${veth} -j DROP`),
    ...(out
      ? [
          // Link-local (cloud metadata) is never forwarded, whatever the namespace allows:
          // the second layer of NEVER_RANGES for the one range the host would route.
          rule("filter", "FORWARD", `-i ${veth} -d ${LINK_LOCAL_RANGE} -j DROP`),
          rule("filter", "FORWARD", `-i ${veth} -o ${out} -j ACCEPT`),
          rule("filter", "FORWARD", `-i ${out} -o ${veth} ${established} -j ACCEPT`),
        ]
      : []),
    // Not to other slots, not to any other interface; nothing routed in from elsewhere.
    rule("filter", "FORWARD", `-i ${veth} -j DROP`),
    rule("filter", "FORWARD", `-o ${veth} -j DROP`),
    ...(out
      ? [rule("nat", "POSTROUTING", `-s ${slot.hostAddress}/32 -o ${out} -j MASQUERADE`)]
      : []),
  ];
  // The comment goes just before the target (and its options), where iptables-save prints it.
  const comment = ["-m", "comment", "--comment", hostRuleComment(slot.ruleTag, slot.index)];
  return rules.map((r) => {
    const target = r.spec.indexOf("-j");
    return { ...r, spec: [...r.spec.slice(0, target), ...comment, ...r.spec.slice(target)] };
  });
}

/** `spec` is split on spaces: only for the fixed rules above (no quoting needed). */
function rule(table: HostRule["table"], chain: string, spec: string): HostRule {
  return { table, chain, spec: spec.split(" ") };
}

/**
 * Inserts the rules at the top of their chains (ahead of a host firewall's own rules), in
 * the given order, in one transaction.
 */
export async function insertHostRules(run: RunCommand, rules: readonly HostRule[]): Promise<void> {
  // Each -I lands at position 1, so insert in reverse to keep the order.
  const lines = [...rules]
    .reverse()
    .map((r) => ({ table: r.table, line: `-I ${r.chain} ${r.spec.join(" ")}` }));
  await withHostLock(() => restore(run, lines));
}

/** Deletes exactly these rules, in one transaction (fails if one of them is missing). */
export async function deleteHostRules(run: RunCommand, rules: readonly HostRule[]): Promise<void> {
  const lines = rules.map((r) => ({ table: r.table, line: `-D ${r.chain} ${r.spec.join(" ")}` }));
  await withHostLock(() => restore(run, lines));
}

/** Whether exactly this rule is in the host's tables (`iptables -C`). */
export async function hostRuleExists(run: RunCommand, rule: HostRule): Promise<boolean> {
  try {
    await run("iptables", ["-w", "-t", rule.table, "-C", rule.chain, ...rule.spec]);
    return true;
  } catch (err) {
    // Exit 1: no such rule ("Bad rule (does a matching rule exist in that chain?)").
    if (err instanceof NetworkError && err.exitCode === 1) return false;
    throw err;
  }
}

/** A Warren rule found in the host's tables: `-A ...` line as iptables-save prints it. */
export interface FoundHostRule {
  readonly table: string;
  readonly line: string;
  readonly index: number;
}

/** Every host rule carrying a `<ruleTag>:<n>` comment. */
export async function findHostRules(run: RunCommand, ruleTag: string): Promise<FoundHostRule[]> {
  const pattern = commentPattern(ruleTag);
  const { stdout } = await run("iptables-save", []);
  const found: FoundHostRule[] = [];
  let table = "";
  for (const line of stdout.split("\n")) {
    if (line.startsWith("*")) table = line.slice(1).trim();
    const match = line.startsWith("-A ") ? pattern.exec(line) : null;
    if (match?.[1]) found.push({ table, line, index: Number(match[1]) });
  }
  return found;
}

/** Deletes rules found by findHostRules, in one transaction. */
export async function deleteFoundHostRules(
  run: RunCommand,
  rules: readonly FoundHostRule[],
): Promise<void> {
  if (rules.length === 0) return;
  const lines = rules.map((r) => ({ table: r.table, line: `-D${r.line.slice(2)}` }));
  await withHostLock(() => restore(run, lines));
}

/**
 * Replaces rules found earlier (an earlier server's, of one slot) by `rules`, each table in
 * one transaction: never a moment with neither (the slot's guest runs meanwhile).
 */
export async function replaceHostRules(
  run: RunCommand,
  earlier: readonly FoundHostRule[],
  rules: readonly HostRule[],
): Promise<void> {
  const lines = [
    ...earlier.map((r) => ({ table: r.table, line: `-D${r.line.slice(2)}` })),
    ...[...rules]
      .reverse()
      .map((r) => ({ table: r.table, line: `-I ${r.chain} ${r.spec.join(" ")}` })),
  ];
  await withHostLock(() => restore(run, lines));
}

/** Removes every host rule of one slot, whichever of them exist. */
export async function purgeHostRules(
  run: RunCommand,
  ruleTag: string,
  index: number,
): Promise<void> {
  const found = (await findHostRules(run, ruleTag)).filter((r) => r.index === index);
  await deleteFoundHostRules(run, found);
}

/** Runs `iptables-restore --noflush` on lines (each tagged with its table) in one transaction. */
async function restore(
  run: RunCommand,
  lines: readonly { table: string; line: string }[],
): Promise<void> {
  const tables = new Map<string, string[]>();
  for (const { table, line } of lines) tables.set(table, [...(tables.get(table) ?? []), line]);
  let input = "";
  for (const [table, list] of tables) input += `*${table}\n${list.join("\n")}\nCOMMIT\n`;
  await run("iptables-restore", ["-w", "--noflush"], { input });
}

// The host's tables are shared by every slot: one transaction at a time from this process.
let hostQueue: Promise<unknown> = Promise.resolve();

function withHostLock<T>(fn: () => Promise<T>): Promise<T> {
  const result = hostQueue.then(fn, fn);
  hostQueue = result.catch(() => {});
  return result;
}
