import { GATEWAY_ADDRESS, GUEST_ADDRESS, VOLUME_NFS_PORT } from "../protocol/index.js";
import { type EgressPolicy, NEVER_RANGES, PRIVATE_RANGES } from "./egress-policy.js";
import { cidrWithin, type Ipv4Cidr, parseCidr } from "./ipv4.js";
import { NETNS_VETH, type SlotAddresses, TAP_NAME } from "./slot-addressing.js";

// The iptables ruleset inside one slot's namespace (iptables-restore input). The namespace
// is a router between the guest (tap0) and the host (eth0); the one thing that listens in it
// is the server's NFS socket for the sandbox's volumes, for the guest alone.

/** Per-packet egress decision for guest-initiated traffic; rebuilt on every policy change. */
export const EGRESS_CHAIN = "WARREN-EGRESS";
/** Refuses fast: TCP gets a reset, the rest an ICMP "administratively prohibited". */
export const REJECT_CHAIN = "WARREN-REJECT";
/**
 * nat: what the egress gate takes (egress-gate/): while the policy lists domains, every DNS
 * query, and the new TCP connections the egress chain would refuse; while it has header
 * rules, every new TCP connection. Empty otherwise.
 */
export const GATE_CHAIN = "WARREN-GATE";
/** Where the gate listens, on the gateway address inside the namespace. */
export const GATE_TCP_PORT = 15001;
export const GATE_DNS_PORT = 53;

/**
 * The whole ruleset of a new slot namespace, applied with a plain `iptables-restore`
 * (replacing the namespace's empty tables).
 *
 * @param limits what no policy opens, and what only a narrow allowOut entry opens
 *   (egressLimits()).
 */
export function netnsRuleset(
  slot: SlotAddresses,
  policy: EgressPolicy,
  limits: EgressLimits,
): string {
  const served = [
    ["tcp", VOLUME_NFS_PORT],
    ["tcp", GATE_TCP_PORT],
    ["tcp", GATE_DNS_PORT],
    ["udp", GATE_DNS_PORT],
  ] as const;
  const guest = `${GUEST_ADDRESS}/32`;
  return lines(
    "*nat",
    ":PREROUTING ACCEPT [0:0]",
    ":INPUT ACCEPT [0:0]",
    ":OUTPUT ACCEPT [0:0]",
    ":POSTROUTING ACCEPT [0:0]",
    `:${GATE_CHAIN} - [0:0]`,
    `-A PREROUTING -i ${TAP_NAME} -j ${GATE_CHAIN}`,
    ...gateChainRules(policy, limits),
    // The host reaches the guest at the slot's own address.
    `-A PREROUTING -i ${NETNS_VETH} -d ${slot.hostAddress}/32 -j DNAT --to-destination ${GUEST_ADDRESS}`,
    // The guest's traffic leaves as the slot's address (the host then masquerades it).
    `-A POSTROUTING -o ${NETNS_VETH} -s ${guest} -j SNAT --to-source ${slot.hostAddress}`,
    "COMMIT",
    "*filter",
    ":INPUT DROP [0:0]",
    ":FORWARD DROP [0:0]",
    ":OUTPUT DROP [0:0]",
    `:${EGRESS_CHAIN} - [0:0]`,
    `:${REJECT_CHAIN} - [0:0]`,
    // Nothing in the namespace serves anyone but its guest, on the gateway address: its
    // volumes (NFS) and, while the policy lists domains, the egress gate (TCP and DNS).
    // Neither the guest nor the host side may open other connections to it.
    "-A INPUT -i lo -j ACCEPT",
    "-A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
    ...served.map(
      ([proto, port]) =>
        `-A INPUT -i ${TAP_NAME} -s ${guest} -p ${proto} -d ${GATEWAY_ADDRESS}/32 --dport ${port} -m conntrack --ctstate NEW -j ACCEPT`,
    ),
    // Nor does anything in it open connections: whatever runs in the namespace (a VMM that
    // opens its tap itself, one its guest took over) would leave by the host's NAT around
    // the egress policy, which polices forwarded traffic only. What the kernel itself sends
    // about forwarded packets (the refusals' resets and ICMP errors) is RELATED to them;
    // no unprivileged process can make a packet RELATED.
    "-A OUTPUT -o lo -j ACCEPT",
    "-A OUTPUT -m conntrack --ctstate RELATED -j ACCEPT",
    // Replies on the guest's own connections to what serves it, and the kernel's resets and
    // time-wait ACKs on them (a resumed guest's connection to a server of another slot is
    // reset, and it reconnects): so no owner match, these have no socket of the server's.
    // The server opens nothing to the guest; anything else listening there could only ever
    // answer the guest, which its VMM reaches anyway.
    ...served.map(
      ([proto, port]) =>
        `-A OUTPUT -o ${TAP_NAME} -d ${guest} -p ${proto} -s ${GATEWAY_ADDRESS}/32 --sport ${port} -m conntrack --ctstate ESTABLISHED -j ACCEPT`,
    ),
    // A guest may only send from its own address (no spoofing past the SNAT).
    `-A FORWARD -i ${TAP_NAME} ! -s ${guest} -j DROP`,
    // Host-initiated connections (DNATed above), both directions, whatever the policy.
    `-A FORWARD -i ${NETNS_VETH} -o ${TAP_NAME} -d ${guest} -m conntrack --ctstate DNAT -j ACCEPT`,
    `-A FORWARD -i ${TAP_NAME} -o ${NETNS_VETH} -m conntrack --ctstate DNAT -j ACCEPT`,
    // Every packet the guest sends on its own connections goes through the policy, not just
    // the first: a policy change also cuts connections that are already open.
    `-A FORWARD -i ${TAP_NAME} -o ${NETNS_VETH} -j ${EGRESS_CHAIN}`,
    `-A FORWARD -i ${NETNS_VETH} -o ${TAP_NAME} -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT`,
    `-A ${REJECT_CHAIN} -p tcp -j REJECT --reject-with tcp-reset`,
    `-A ${REJECT_CHAIN} -j REJECT --reject-with icmp-admin-prohibited`,
    ...egressChainRules(policy, limits),
    "COMMIT",
  );
}

/** Replaces the egress and gate chains alone, atomically: `iptables-restore --noflush`. */
export function egressUpdate(policy: EgressPolicy, limits: EgressLimits): string {
  // Declaring a chain under --noflush empties it first.
  return lines(
    "*nat",
    `:${GATE_CHAIN} - [0:0]`,
    ...gateChainRules(policy, limits),
    "COMMIT",
    "*filter",
    `:${EGRESS_CHAIN} - [0:0]`,
    ...egressChainRules(policy, limits),
    "COMMIT",
  );
}

/**
 * The gate chain (nat PREROUTING, from the guest): empty without domains or header rules.
 * With domains, every DNS query goes to the gate's resolver, and each new TCP connection
 * the egress chain would refuse goes to the gate's listener, which lets it through when it
 * names an allowed domain; what the chain accepts goes its own way, untouched. With header
 * rules, every new TCP connection goes to the gate (a ruled name may be at any address);
 * it judges each as the egress chain would. What serves the guest on the gateway (its
 * volumes, the gate itself) is never redirected.
 */
export function gateChainRules(policy: EgressPolicy, limits: EgressLimits): string[] {
  const domains = Boolean(policy.allowDomains?.length);
  const rules = Boolean(policy.headerRules?.length);
  if (!domains && !rules) return [];
  const dns = (proto: string) =>
    `-A ${GATE_CHAIN} -p ${proto} --dport 53 -j REDIRECT --to-ports ${GATE_DNS_PORT}`;
  const toGate = `-p tcp -m conntrack --ctstate NEW -j REDIRECT --to-ports ${GATE_TCP_PORT}`;
  return [
    `-A ${GATE_CHAIN} -d ${GATEWAY_ADDRESS}/32 -j RETURN`,
    ...(domains ? [dns("udp"), dns("tcp")] : []),
    ...(rules
      ? [`-A ${GATE_CHAIN} ${toGate}`]
      : verdictRules(policy, limits, { chain: GATE_CHAIN, accept: "-j RETURN", refuse: toGate })),
  ];
}

/** Destinations the egress chain judges before the policy's own lists. */
export interface EgressLimits {
  /** Refused whatever the policy: every slot, the host's own addresses, NEVER_RANGES. */
  readonly never: readonly string[];
  /**
   * Refused unless an allowOut entry inside one of them names the destination: the private
   * ranges and the host's own networks (its LANs, whatever their addresses).
   */
  readonly restricted: readonly string[];
}

/**
 * The egress chain, in evaluation order (see EgressPolicy for why this order). allowOut
 * entries are split in two: those inside a restricted range come before the ranges'
 * refusal (they name it), the others after it (0.0.0.0/0 opens the internet, not the LAN).
 */
export function egressChainRules(policy: EgressPolicy, limits: EgressLimits): string[] {
  return verdictRules(policy, limits, {
    chain: EGRESS_CHAIN,
    accept: "-j ACCEPT",
    refuse: `-j ${REJECT_CHAIN}`,
  });
}

/** The policy's verdicts in evaluation order, as rules of `chain` ending in `accept`/`refuse`. */
function verdictRules(
  policy: EgressPolicy,
  limits: EgressLimits,
  to: { readonly chain: string; readonly accept: string; readonly refuse: string },
): string[] {
  const rule = (cidr: string, verdict: string) => `-A ${to.chain} -d ${cidr} ${verdict}`;
  const restricted = limits.restricted.map(cidrOf);
  const names = (entry: string) => restricted.some((range) => cidrWithin(cidrOf(entry), range));
  return [
    ...limits.never.map((cidr) => rule(cidr, to.refuse)),
    ...policy.allowOut.filter(names).map((cidr) => rule(cidr, to.accept)),
    ...limits.restricted.map((cidr) => rule(cidr, to.refuse)),
    ...policy.allowOut.filter((entry) => !names(entry)).map((cidr) => rule(cidr, to.accept)),
    ...policy.denyOut.map((cidr) => rule(cidr, to.refuse)),
    `-A ${to.chain} ${policy.allowInternet ? to.accept : to.refuse}`,
  ];
}

/**
 * The limits of every slot of a pool on this host: `baseCidr` is the pool's block,
 * `hostAddresses` the host's IPv4 addresses, `hostNetworks` the networks they are on (its
 * LANs). A network inside a range already listed adds nothing and is left out.
 */
export function egressLimits(
  baseCidr: string,
  hostAddresses: readonly string[],
  hostNetworks: readonly string[],
): EgressLimits {
  const never = [baseCidr, ...hostAddresses.map((a) => `${a}/32`), ...NEVER_RANGES];
  const listed = [...never, ...PRIVATE_RANGES].map(cidrOf);
  const lans = [...new Set(hostNetworks)].filter(
    (net) => !listed.some((range) => cidrWithin(cidrOf(net), range)),
  );
  return { never, restricted: [...PRIVATE_RANGES, ...lans] };
}

/** A CIDR this module was given already checked (policy entries, constants, the host's). */
function cidrOf(text: string): Ipv4Cidr {
  const cidr = parseCidr(text);
  if (!cidr) throw new Error(`not an IPv4 CIDR: ${text}`);
  return cidr;
}

function lines(...items: string[]): string {
  return `${items.join("\n")}\n`;
}
