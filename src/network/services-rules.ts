import type { RunCommand } from "./command-runner.js";
import { LINK_LOCAL_RANGE } from "./egress-policy.js";
import {
  deleteFoundHostRules,
  deleteHostRules,
  type FoundHostRule,
  type HostRule,
  insertHostRules,
} from "./host-rules.js";

/** The host uids a process may run as (inclusive): the guest services' user namespace. */
export interface UidRange {
  readonly first: number;
  readonly last: number;
}

/**
 * What the guest services process may not reach from the host's network namespace, where
 * its gates open upstream connections: no TCP port of the host's own (the API, the cluster
 * port, a database — anything on loopback or an address of the host's, which Linux routes
 * through `lo`) bar DNS, and nothing link-local (cloud metadata). Its gates never go there
 * (their limits refuse the host and link-local, egress-gate/decide.ts); these rules hold if
 * the process itself is taken over through a parser of its. Commented `<ruleTag>:services`.
 */
export function servicesRules(ruleTag: string, uids: UidRange): HostRule[] {
  const owner = ["-m", "owner", "--uid-owner", `${uids.first}-${uids.last}`];
  const comment = ["-m", "comment", "--comment", servicesComment(ruleTag)];
  return [
    {
      table: "filter",
      chain: "OUTPUT",
      spec: [
        ...["-o", "lo", "-p", "tcp", "!", "--dport", "53"],
        ...owner,
        ...comment,
        ...["-j", "REJECT", "--reject-with", "tcp-reset"],
      ],
    },
    {
      table: "filter",
      chain: "OUTPUT",
      spec: [
        ...["-d", LINK_LOCAL_RANGE],
        ...owner,
        ...comment,
        ...["-j", "REJECT", "--reject-with", "icmp-admin-prohibited"],
      ],
    },
  ];
}

/**
 * Puts the rules in place (replacing whatever an earlier server of this tag left); returns
 * what removes them.
 */
export async function installServicesRules(
  run: RunCommand,
  ruleTag: string,
  uids: UidRange,
): Promise<() => Promise<void>> {
  await removeServicesRules(run, ruleTag);
  const rules = servicesRules(ruleTag, uids);
  await insertHostRules(run, rules);
  return async () => {
    await deleteHostRules(run, rules).catch(() => removeServicesRules(run, ruleTag));
  };
}

/** Removes every rule commented `<ruleTag>:services`. */
export async function removeServicesRules(run: RunCommand, ruleTag: string): Promise<void> {
  const comment = servicesComment(ruleTag).replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const { stdout } = await run("iptables-save", []);
  const found: FoundHostRule[] = [];
  let table = "";
  for (const line of stdout.split("\n")) {
    if (line.startsWith("*")) table = line.slice(1).trim();
    if (line.startsWith("-A ") && new RegExp(`--comment "?${comment}"?(\\s|$)`).test(line)) {
      found.push({ table, line, index: 0 });
    }
  }
  await deleteFoundHostRules(run, found);
}

function servicesComment(ruleTag: string): string {
  return `${ruleTag}:services`;
}
