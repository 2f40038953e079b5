import { parseDomainPattern } from "../shared/domain-patterns.js";
import { type HeaderRule, validateHeaderRules } from "./egress-gate/header-rules.js";
import { EgressPolicyError } from "./errors.js";
import { formatCidr, parseCidr } from "./ipv4.js";

/**
 * What a guest may reach. Host-initiated connections to the guest (envd) are not affected.
 * Order of evaluation: the host's own addresses, every slot and NEVER_RANGES (link-local and
 * cloud metadata among them) are always refused; then an `allowOut` entry that lies inside a
 * private range or one of the host's own networks (its LANs) accepts; then those ranges are
 * refused; then the other `allowOut` entries accept; then `denyOut` refuses; then
 * `allowInternet` decides. So allow wins over deny, and a private range or LAN opens only
 * to an `allowOut` entry that names it (10.1.2.3, 10.0.0.0/8), never to a wider one
 * (0.0.0.0/0).
 */
export interface EgressPolicy {
  /** Whether the guest may reach public addresses (those in no list below). */
  readonly allowInternet: boolean;
  /** IPv4 addresses or CIDRs always reachable, even with allowInternet false or in denyOut. */
  readonly allowOut: readonly string[];
  /** IPv4 addresses or CIDRs never reachable, unless also matched by allowOut. */
  readonly denyOut: readonly string[];
  /**
   * Names reachable whatever their address (`example.com`, `*.example.com`), within the
   * limits no policy opens; given among `allowOut` (E2B's way), split out by
   * validateEgressPolicy. While any is set, DNS answers only these names (egress-gate/).
   */
  readonly allowDomains?: readonly string[];
  /**
   * Headers set on HTTPS requests to some domains (E2B's `network.rules`), by the egress
   * gate, which terminates TLS for those domains alone (egress-gate/intercept.ts). Rules
   * open nothing: the destination must be allowed as any other.
   */
  readonly headerRules?: readonly HeaderRule[];
  /** Whose secrets fill the rules' `${e2b.secrets.NAME}` (the sandbox's team). */
  readonly secretsOf?: string;
}

export const DEFAULT_EGRESS_POLICY: EgressPolicy = Object.freeze({
  allowInternet: true,
  allowOut: Object.freeze([]),
  denyOut: Object.freeze([]),
  allowDomains: Object.freeze([]),
  headerRules: Object.freeze([]),
});

/** Refused unless an allowOut entry inside the range names the destination. */
export const PRIVATE_RANGES: readonly string[] = Object.freeze([
  "10.0.0.0/8",
  "172.16.0.0/12",
  "192.168.0.0/16",
  "100.64.0.0/10",
]);

/** IPv4 link-local, where clouds serve instance metadata (169.254.169.254). */
export const LINK_LOCAL_RANGE = "169.254.0.0/16";

/**
 * Refused whatever the policy: "this network", loopback, link-local (169.254.169.254 is the
 * metadata service of most clouds: instance credentials), multicast, reserved. The guest's
 * own link (169.254.0.20/30, on the tap) is not routed through the egress rules at all.
 */
export const NEVER_RANGES: readonly string[] = Object.freeze([
  "0.0.0.0/8",
  "127.0.0.0/8",
  LINK_LOCAL_RANGE,
  "224.0.0.0/4",
  "240.0.0.0/4",
]);

/** Upper bound per list: each entry is one iptables rule evaluated per guest packet. */
export const MAX_POLICY_ENTRIES = 1000;

/**
 * Checks a policy given by a caller and returns it normalized (CIDRs with host bits cleared,
 * single addresses as /32, duplicates removed) and frozen. Throws EgressPolicyError naming
 * the first bad entry.
 */
export function validateEgressPolicy(policy: EgressPolicy): EgressPolicy {
  if (typeof policy !== "object" || policy === null) {
    throw new EgressPolicyError("egress policy must be an object", String(policy));
  }
  if (typeof policy.allowInternet !== "boolean") {
    throw new EgressPolicyError(
      "egress policy allowInternet must be true or false",
      String(policy.allowInternet),
    );
  }
  const allowOut = Array.isArray(policy.allowOut) ? (policy.allowOut as unknown[]) : [];
  const isDomain = (entry: unknown) =>
    typeof entry === "string" &&
    parseCidr(entry.trim()) === undefined &&
    parseDomainPattern(entry.trim()) !== undefined;
  const domains = [...(policy.allowDomains ?? []), ...allowOut.filter(isDomain)] as string[];
  if (domains.length > MAX_POLICY_ENTRIES) {
    throw new EgressPolicyError(
      `egress policy allowOut has ${domains.length} domains, more than ${MAX_POLICY_ENTRIES}`,
      String(domains[MAX_POLICY_ENTRIES]),
    );
  }
  const allowDomains = [
    ...new Set(
      domains.map((entry) => {
        const pattern = parseDomainPattern(String(entry).trim());
        if (!pattern)
          throw new EgressPolicyError(`egress policy domain "${entry}" is not a host name`, entry);
        return pattern.entry;
      }),
    ),
  ];
  const headerRules = validateHeaderRules(policy.headerRules ?? []);
  return Object.freeze({
    allowInternet: policy.allowInternet,
    allowOut: normalizeList(
      "allowOut",
      Array.isArray(policy.allowOut)
        ? allowOut.filter((entry) => !isDomain(entry))
        : policy.allowOut,
    ),
    denyOut: normalizeList("denyOut", policy.denyOut),
    allowDomains: Object.freeze(allowDomains),
    headerRules,
    // Whose secrets matter only to rules that name them: without rules, a team's policy is
    // the pool's default, and a slot kept ready serves it with no rule rewritten (~20 ms).
    ...(policy.secretsOf !== undefined &&
      headerRules.length > 0 && { secretsOf: policy.secretsOf }),
  });
}

function normalizeList(name: string, list: unknown): readonly string[] {
  if (!Array.isArray(list)) {
    throw new EgressPolicyError(`egress policy ${name} must be a list of strings`, String(list));
  }
  if (list.length > MAX_POLICY_ENTRIES) {
    throw new EgressPolicyError(
      `egress policy ${name} has ${list.length} entries, more than ${MAX_POLICY_ENTRIES}`,
      String(list[MAX_POLICY_ENTRIES]),
    );
  }
  const out = new Set<string>();
  for (const entry of list) {
    const cidr = typeof entry === "string" ? parseCidr(entry.trim()) : undefined;
    if (!cidr) {
      throw new EgressPolicyError(
        `egress policy ${name} entry "${String(entry)}" is not an IPv4 address or CIDR ` +
          "(e.g. 203.0.113.7 or 203.0.113.0/24)" +
          (name === "allowOut" ? ", nor a domain (example.com, *.example.com)" : ""),
        String(entry),
      );
    }
    out.add(formatCidr(cidr));
  }
  return Object.freeze([...out]);
}

export function sameEgressPolicy(a: EgressPolicy, b: EgressPolicy): boolean {
  const sameList = (x: readonly string[], y: readonly string[]) =>
    x.length === y.length && x.every((v, i) => v === y[i]);
  return (
    a.allowInternet === b.allowInternet &&
    sameList(a.allowOut, b.allowOut) &&
    sameList(a.denyOut, b.denyOut) &&
    sameList(a.allowDomains ?? [], b.allowDomains ?? []) &&
    JSON.stringify(a.headerRules ?? []) === JSON.stringify(b.headerRules ?? []) &&
    a.secretsOf === b.secretsOf
  );
}
