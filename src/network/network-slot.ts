import { existsSync } from "node:fs";
import {
  GATEWAY_ADDRESS,
  GATEWAY_MAC,
  GUEST_ADDRESS,
  GUEST_LINK_PREFIX,
  GUEST_MAC,
} from "../protocol/index.js";
import { type Logger, WarrenError } from "../shared/index.js";
import type { RunCommand } from "./command-runner.js";
import { flushHostConntrack, flushNamespaceConntrack } from "./conntrack.js";
import type { GateHost, OpenGate } from "./egress-gate/gate-host.js";
import { DEFAULT_EGRESS_POLICY, type EgressPolicy, validateEgressPolicy } from "./egress-policy.js";
import { SlotTakenError } from "./errors.js";
import { enableForwarding } from "./host-forwarding.js";
import { hostEgressLimits } from "./host-info.js";
import {
  deleteHostRules,
  findHostRules,
  type HostRule,
  hostRules,
  insertHostRules,
  purgeHostRules,
  replaceHostRules,
} from "./host-rules.js";
import { formatCidr, type Ipv4Cidr } from "./ipv4.js";
import { remountNamespace } from "./netns-mount.js";
import { type EgressLimits, egressUpdate, netnsRuleset } from "./netns-rules.js";
import { NETNS_VETH, type SlotAddresses, slotAddresses, TAP_NAME } from "./slot-addressing.js";
import type { SlotNames } from "./slot-names.js";
import type { Slot } from "./slot-pool.js";

/** What every slot of a pool shares. */
export interface SlotSettings {
  /** Block the slots' /31s are carved from. */
  readonly base: Ipv4Cidr;
  /** What the slots' namespaces, host veths and host rules are called (checked). */
  readonly names: SlotNames;
  /** Owner of the tap, so a QEMU running as this user can open it; root only when absent. */
  readonly tapOwner: { readonly uid: number; readonly gid: number } | undefined;
  /** Host interface guest traffic leaves by; no egress at all when undefined. */
  readonly egressInterface: string | undefined;
  /** The only local user that may open connections to a slot (the server's). */
  readonly serverUid: number;
  readonly run: RunCommand;
  /** Where the slot's egress gate runs while its policy needs one (egress-gate/gate-host.ts). */
  readonly gates: GateHost;
  readonly logger?: Logger;
}

/**
 * One sandbox's network: namespace `warren-<n>` (by default; see SlotNames) holding the
 * guest's tap (`tap0`, 169.254.0.22/30, fixed MAC) and the namespace end (`eth0`) of a veth
 * pair whose host end is `wv<n>`. The host reaches the guest at `hostAddress`; the egress policy can change while
 * the guest runs. Create through NetnsSlotPool (or `NetworkSlot.create` directly).
 */
export class NetworkSlot implements Slot, SlotAddresses {
  readonly index: number;
  readonly netns: string;
  readonly netnsPath: string;
  readonly hostVeth: string;
  readonly ruleTag: string;
  readonly hostVethAddress: string;
  readonly hostAddress: string;
  /** The device QEMU opens inside the namespace (`-netdev tap,ifname=tap0,script=no`). */
  readonly tapName = TAP_NAME;
  readonly tapMac = GATEWAY_MAC;
  readonly guestAddress = GUEST_ADDRESS;
  readonly guestMac = GUEST_MAC;
  readonly gateway = GATEWAY_ADDRESS;

  readonly #settings: SlotSettings;
  readonly #hostRules: readonly HostRule[];
  #policy: EgressPolicy;
  /** While the policy lists domains or has header rules: the gate serving this slot's guest (egress-gate/). */
  #gate: OpenGate | undefined;
  #queue: Promise<unknown> = Promise.resolve();
  #destroyed = false;
  #removed = false;

  private constructor(settings: SlotSettings, addresses: SlotAddresses, policy: EgressPolicy) {
    this.index = addresses.index;
    this.netns = addresses.netns;
    this.netnsPath = addresses.netnsPath;
    this.hostVeth = addresses.hostVeth;
    this.ruleTag = addresses.ruleTag;
    this.hostVethAddress = addresses.hostVethAddress;
    this.hostAddress = addresses.hostAddress;
    this.#settings = settings;
    this.#hostRules = hostRules(addresses, settings);
    this.#policy = policy;
  }

  /**
   * Creates slot `index`. If any step fails, whatever was created is removed before the
   * error (a NetworkError naming the failed command) is thrown. Throws SlotTakenError,
   * touching nothing, if the slot's namespace or host veth already exists.
   */
  static async create(
    settings: SlotSettings,
    index: number,
    policy: EgressPolicy = DEFAULT_EGRESS_POLICY,
  ): Promise<NetworkSlot> {
    const slot = new NetworkSlot(
      settings,
      slotAddresses(settings.base, index, settings.names),
      validateEgressPolicy(policy),
    );
    if (existsSync(slot.netnsPath) || existsSync(`/sys/class/net/${slot.hostVeth}`)) {
      throw new SlotTakenError(
        `network slot ${index} already exists on this host (${slot.netns} or ${slot.hostVeth}); ` +
          "NetnsSlotPool.cleanupStale() removes what an earlier server left",
        index,
      );
    }
    const { run } = settings;
    // Steps run in parallel where they do not depend on each other (rules name interfaces
    // that need not exist yet); every step settles before any rollback starts.
    const inNamespace = async () => {
      await run("ip", ["-batch", "-"], { input: slot.#hostBatch() });
      await settleAll([
        run("ip", ["-n", slot.netns, "-batch", "-"], { input: slot.#netnsBatch() }),
        run("nsenter", [`--net=${slot.netnsPath}`, "iptables-restore"], {
          input: netnsRuleset(slot, slot.#policy, slot.#limits()),
        }),
        // The host forwards what comes in on this veth, and on no interface of its own
        // choosing (see host-forwarding.ts). Without egress, nothing is forwarded at all.
        ...(settings.egressInterface ? [enableForwarding(slot.hostVeth)] : []),
      ]);
    };
    try {
      await settleAll([inNamespace(), insertHostRules(run, slot.#hostRules)]);
      await slot.#gateFor(slot.#policy);
    } catch (err) {
      slot.#destroyed = true;
      try {
        await removeSlotResources(run, slot);
      } catch (cleanupErr) {
        throw new WarrenError(
          "internal",
          `creating network slot ${index} failed (${String(err)}), and removing what was created failed too: ${String(cleanupErr)}`,
          { cause: err },
        );
      }
      slot.#removed = true;
      throw err;
    }
    return slot;
  }

  /**
   * Takes back slot `index` as an earlier server left it, for a guest that kept running
   * through the restart (its VMM holds the tap): the namespace and host veth must be there
   * (the addresses are the index's: slotAddresses); the namespace's ruleset is written again
   * for `policy` (one `iptables-restore`, atomic: tracked connections stay), the index's
   * host rules replaced by this pool's (one transaction: never a moment without them),
   * forwarding set on the veth, and the gate reopened when `policy` needs one. `hold`: the
   * namespace as the keeper holds it, mounted at its name again when this server's mount
   * namespace lost that mount (remountNamespace). Nothing is removed on failure (a guest
   * may still use it): the pool's cleanupStale removes a slot it did not take back.
   */
  static async adopt(
    settings: SlotSettings,
    index: number,
    policy: EgressPolicy,
    hold?: string,
  ): Promise<NetworkSlot> {
    const slot = new NetworkSlot(
      settings,
      slotAddresses(settings.base, index, settings.names),
      validateEgressPolicy(policy),
    );
    if (hold !== undefined) await remountNamespace(settings.run, slot.netnsPath, hold);
    for (const [what, path] of [
      ["namespace", slot.netnsPath],
      ["host veth", `/sys/class/net/${slot.hostVeth}`],
    ] as const) {
      if (!existsSync(path))
        throw new WarrenError("internal", `network slot ${index} has no ${what} (${path}) left`);
    }
    const { run } = settings;
    const earlier = (await findHostRules(run, slot.ruleTag)).filter((r) => r.index === index);
    await settleAll([
      run("nsenter", [`--net=${slot.netnsPath}`, "iptables-restore"], {
        input: netnsRuleset(slot, slot.#policy, slot.#limits()),
      }),
      replaceHostRules(run, earlier, slot.#hostRules),
      ...(settings.egressInterface ? [enableForwarding(slot.hostVeth)] : []),
    ]);
    await slot.#gateFor(slot.#policy);
    return slot;
  }

  /** The policy in force (normalized). */
  get policy(): EgressPolicy {
    return this.#policy;
  }

  /** True once destroy() was called (even if it failed). A destroyed slot cannot be used. */
  get destroyed(): boolean {
    return this.#destroyed;
  }

  /**
   * Replaces the egress policy, atomically; applies to the guest's next packet, including on
   * connections already open. Throws EgressPolicyError for a bad entry (nothing changes).
   */
  async setPolicy(policy: EgressPolicy): Promise<void> {
    const next = validateEgressPolicy(policy);
    await this.#serially(async () => {
      if (this.#destroyed) {
        throw new WarrenError("conflict", `network slot ${this.index} is destroyed`);
      }
      // The gate listens before the rules send anything to it, and goes after they stop.
      if (gated(next)) await this.#gateFor(next);
      await this.#settings.run(
        "nsenter",
        [`--net=${this.netnsPath}`, "iptables-restore", "--noflush"],
        {
          input: egressUpdate(next, this.#limits()),
        },
      );
      this.#policy = next;
      if (!gated(next)) await this.#gateFor(next);
    });
  }

  /** Opens, updates or closes the gate for a policy (open only while it needs one). */
  async #gateFor(policy: EgressPolicy): Promise<void> {
    if (!gated(policy)) {
      const gate = this.#gate;
      this.#gate = undefined;
      await gate?.close();
      return;
    }
    if (this.#gate) return this.#gate.update(policy);
    this.#gate = await this.#settings.gates.open(
      { netns: this.netns, gateway: this.gateway, base: formatCidr(this.#settings.base) },
      policy,
    );
  }

  /**
   * Forgets every connection tracked for the slot, in its namespace and on the host: what
   * its last guest opened, and the host's connections to that guest. For a slot between two
   * tenants, after the VMM using the tap has exited.
   */
  async forgetConnections(): Promise<void> {
    await this.#serially(async () => {
      if (this.#destroyed) {
        throw new WarrenError("conflict", `network slot ${this.index} is destroyed`);
      }
      const { run } = this.#settings;
      await settleAll([
        flushNamespaceConntrack(run, this.netnsPath),
        flushHostConntrack(run, this.hostAddress),
      ]);
    });
  }

  /**
   * Removes the namespace (with the tap and veth pair in it) and the host rules. Idempotent;
   * call it after the VMM using the tap has exited.
   */
  async destroy(): Promise<void> {
    this.#destroyed = true;
    await this.#serially(async () => {
      const gate = this.#gate;
      this.#gate = undefined;
      await gate?.close();
      if (this.#removed) return;
      await removeSlotResources(this.#settings.run, this, this.#hostRules);
      this.#removed = true;
    });
  }

  #serially<T>(fn: () => Promise<T>): Promise<T> {
    const result = this.#queue.then(fn, fn);
    this.#queue = result.catch(() => {});
    return result;
  }

  /** Read at each use: the host's addresses and networks change (DHCP, VPNs, new links). */
  #limits(): EgressLimits {
    return hostEgressLimits(this.#settings.base);
  }

  /** Host side: the namespace, its sysctls, the veth pair and the host end's address. */
  #hostBatch(): string {
    return lines(
      `netns add ${this.netns}`,
      // ip_forward: the namespace routes between tap and veth. No IPv6 at all: the guest is
      // IPv4-only and must not reach the namespace over link-local IPv6.
      `netns exec ${this.netns} sysctl -q -w net.ipv4.ip_forward=1 net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1`,
      `link add ${this.hostVeth} type veth peer name ${NETNS_VETH} netns ${this.netns}`,
      `addr add ${this.hostVethAddress}/31 dev ${this.hostVeth}`,
      `link set ${this.hostVeth} up`,
    );
  }

  /** Namespace side: veth end, tap (fixed MAC, owned by the VMM's user), routes, neighbour. */
  #netnsBatch(): string {
    const owner = this.#settings.tapOwner;
    const ownerArgs = owner ? ` user ${owner.uid} group ${owner.gid}` : "";
    return lines(
      "link set lo up",
      `addr add ${this.hostAddress}/31 dev ${NETNS_VETH}`,
      `link set ${NETNS_VETH} up`,
      `tuntap add dev ${TAP_NAME} mode tap${ownerArgs}`,
      `link set ${TAP_NAME} address ${GATEWAY_MAC}`,
      `addr add ${GATEWAY_ADDRESS}/${GUEST_LINK_PREFIX} dev ${TAP_NAME}`,
      `link set ${TAP_NAME} up`,
      `route add default via ${this.hostVethAddress} dev ${NETNS_VETH}`,
      // The guest's MAC never changes: no ARP round trip after boot or restore.
      `neigh replace ${GUEST_ADDRESS} lladdr ${GUEST_MAC} dev ${TAP_NAME} nud permanent`,
    );
  }
}

/**
 * Removes whatever exists of a slot: host veth (its peer goes with it), namespace (and the
 * tap in it, and its connection tracking), host rules, and the host's tracked connections
 * of its address (the next slot with this index must not inherit them). `rules` when the
 * exact rules are known (one transaction); else, or if that fails, every host rule
 * commented with the slot's index.
 */
export async function removeSlotResources(
  run: RunCommand,
  slot: SlotAddresses,
  rules?: readonly HostRule[],
): Promise<void> {
  const batch: string[] = [];
  // The veth first: deleting a namespace frees its devices asynchronously, and the next
  // slot with this index needs its veth name free at once.
  if (existsSync(`/sys/class/net/${slot.hostVeth}`)) batch.push(`link del ${slot.hostVeth}`);
  if (existsSync(slot.netnsPath)) batch.push(`netns del ${slot.netns}`);
  const devices = async () => {
    if (batch.length > 0) await run("ip", ["-force", "-batch", "-"], { input: lines(...batch) });
  };
  const hostRulesGone = async () => {
    if (!rules) return purgeHostRules(run, slot.ruleTag, slot.index);
    // Exact deletion is one command; if a rule is missing, fall back to a search.
    await deleteHostRules(run, rules).catch(() => purgeHostRules(run, slot.ruleTag, slot.index));
  };
  // Connections are forgotten once nothing can add to them (the veth is gone).
  const connectionsGone = async () => {
    await devices();
    await flushHostConntrack(run, slot.hostAddress);
  };
  await settleAll([connectionsGone(), hostRulesGone()]);
}

/** Waits for every promise; then throws the first rejection, if any. */
async function settleAll(promises: readonly Promise<unknown>[]): Promise<void> {
  const results = await Promise.allSettled(promises);
  const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
  if (failed) throw failed.reason;
}

function lines(...items: string[]): string {
  return `${items.join("\n")}\n`;
}

/** Whether a policy needs the egress gate: domains to judge by name, or headers to set. */
function gated(policy: EgressPolicy): boolean {
  return Boolean(policy.allowDomains?.length || policy.headerRules?.length);
}
