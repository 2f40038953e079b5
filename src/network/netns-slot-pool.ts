import { type Logger, silentLogger, WarrenError } from "../shared/index.js";
import { type RunCommand, runCommand } from "./command-runner.js";
import { flushHostConntrack } from "./conntrack.js";
import { hostResolve, type Resolve } from "./egress-gate/decide.js";
import { type GateHost, inProcessGates } from "./egress-gate/gate-host.js";
import type { GateInterception } from "./egress-gate/intercept.js";
import {
  DEFAULT_EGRESS_POLICY,
  type EgressPolicy,
  sameEgressPolicy,
  validateEgressPolicy,
} from "./egress-policy.js";
import { SlotTakenError } from "./errors.js";
import { enableEgressForwarding } from "./host-forwarding.js";
import { defaultRouteInterface } from "./host-info.js";
import { formatCidr, type Ipv4Cidr } from "./ipv4.js";
import { NetworkSlot, type SlotSettings } from "./network-slot.js";
import {
  DEFAULT_BASE_CIDR,
  maxSlotIndex,
  parseBaseCidr,
  slotAddresses,
} from "./slot-addressing.js";
import {
  DEFAULT_SLOT_NAMES,
  type SlotNames,
  slotIndexIn,
  validateSlotNames,
} from "./slot-names.js";
import type { Slot, SlotPool } from "./slot-pool.js";
import { cleanupStaleSlots, type StaleCleanupReport } from "./stale-cleanup.js";

export interface NetnsSlotPoolOptions {
  /** Slots kept created and idle, ready to hand out at once. Default 4. */
  size?: number;
  /** How long a released slot waits before its reset (see #quiet). Default 1 s. */
  reclaimDelayMs?: number;
  /** Most slots at once, idle and in use. Default: as many /31s as `baseCidr` holds, less one. */
  maxSlots?: number;
  /**
   * Private IPv4 block carved into one /31 per slot. Default "10.201.0.0/16". Two pools on
   * one host need blocks that do not overlap (each slot's /31 is a route on the host).
   */
  baseCidr?: string;
  /**
   * Slot `n`'s namespace is `<netnsPrefix><n>`. Default "warren-". Must not end in a digit.
   * Two pools on one host need different names: cleanupStale() removes every slot of these
   * names it does not own (netnsPrefix, hostVethPrefix and ruleTag alike).
   */
  netnsPrefix?: string;
  /**
   * Slot `n`'s host veth is `<hostVethPrefix><n>`. Default "wv". Must not end in a digit, and
   * with the base block's highest index must fit Linux's 15-character interface names.
   */
  hostVethPrefix?: string;
  /** Slot `n`'s host rules carry the comment `<ruleTag>:<n>`. Default "warren". */
  ruleTag?: string;
  /** Owner of every tap, so a QEMU running as this user and group can open it. Default: root only. */
  tapOwner?: { uid: number; gid: number };
  /**
   * The only local user whose processes may open connections to the slots' addresses (the
   * server's: its proxy and envd client). Any other user of the host is refused, so nobody
   * reaches a guest around the proxy. Default: this process's uid.
   */
  serverUid?: number;
  /**
   * Host interface guest traffic leaves by (masqueraded). Default: the interface of the
   * host's default route when start() runs; without one, guests have no egress.
   */
  egressInterface?: string;
  /** Policy of a slot handed out without one, and of every released slot. Default: internet on, no lists. */
  defaultPolicy?: EgressPolicy;
  logger?: Logger;
  /** Runs every command; tests wrap it to inject failures. Default: runCommand. */
  runner?: RunCommand;
  /**
   * Resolves the names a policy's domain entries allow (the egress gate's upstream
   * resolver). Default: the host's resolver (`/etc/resolv.conf`).
   */
  resolve?: Resolve;
  /** What header rules need (the node's egress CA, its secrets); unset: rules are refused. */
  interception?: GateInterception;
  /**
   * Where the slots' egress gates run. Default: in this process (`inProcessGates` with
   * `resolve` and `interception`); a node's server runs them in its guest services process.
   */
  gates?: GateHost;
}

/**
 * Creates network slots ahead of need and reuses them. acquire() hands out a slot with the
 * requested (or default) egress policy; release() resets a slot whose sandbox ended and
 * keeps it for the next one; close() removes every slot. One pool per set of names (and
 * base block) on a host: at start, cleanupStale() removes what an earlier server with the
 * same names left, and nothing else.
 */
export class NetnsSlotPool implements SlotPool {
  readonly #size: number;
  readonly #maxSlots: number;
  readonly #defaultPolicy: EgressPolicy;
  readonly #logger: Logger;
  readonly #run: RunCommand;
  readonly #options: NetnsSlotPoolOptions;
  readonly #base: Ipv4Cidr;
  readonly #names: SlotNames;
  /** Indexes with something on the host: idle, in use, being created or being destroyed. */
  readonly #taken = new Set<number>();
  /** Indexes found in use by someone else (SlotTakenError); skipped until cleanupStale. */
  readonly #foreign = new Set<number>();
  readonly #idle: NetworkSlot[] = [];
  readonly #inUse = new Set<NetworkSlot>();
  /** Slots handed back and being reset (or removed): close() waits for them. */
  readonly #releasing = new Set<Promise<void>>();
  /** Released slots waiting out #quiet: close() ends their wait. */
  readonly #waking = new Set<() => void>();
  readonly #reclaimDelayMs: number;
  #settings: Promise<SlotSettings> | undefined;
  #refilling: Promise<void> | undefined;
  /** The slot the refill is making now; its index is taken already. */
  #making: Promise<NetworkSlot> | undefined;
  #closed = false;
  /** The block's host conntrack was flushed of what earlier slots left (once, at start). */
  #conntrackSwept = false;

  constructor(options: NetnsSlotPoolOptions = {}) {
    this.#options = options;
    this.#base = parseBaseCidr(options.baseCidr ?? DEFAULT_BASE_CIDR);
    const capacity = maxSlotIndex(this.#base);
    this.#names = validateSlotNames(
      {
        netnsPrefix: options.netnsPrefix ?? DEFAULT_SLOT_NAMES.netnsPrefix,
        hostVethPrefix: options.hostVethPrefix ?? DEFAULT_SLOT_NAMES.hostVethPrefix,
        ruleTag: options.ruleTag ?? DEFAULT_SLOT_NAMES.ruleTag,
      },
      capacity,
    );
    this.#size = checkCount("size", options.size ?? 4, capacity);
    this.#reclaimDelayMs = options.reclaimDelayMs ?? 1_000;
    this.#maxSlots = checkCount("maxSlots", options.maxSlots ?? capacity, capacity);
    if (this.#maxSlots < this.#size) {
      throw new WarrenError(
        "invalid_argument",
        `maxSlots (${this.#maxSlots}) must be at least size (${this.#size})`,
      );
    }
    if (options.serverUid !== undefined && !isId(options.serverUid)) {
      throw new WarrenError("invalid_argument", "serverUid must be a non-negative integer");
    }
    const owner = options.tapOwner;
    if (owner && !(isId(owner.uid) && isId(owner.gid))) {
      throw new WarrenError(
        "invalid_argument",
        "tapOwner must be { uid, gid } with non-negative integers",
      );
    }
    const egress = options.egressInterface;
    if (egress !== undefined && !/^[^\s/:"'!]{1,15}$/.test(egress)) {
      throw new WarrenError(
        "invalid_argument",
        `egressInterface "${egress}" is not an interface name`,
      );
    }
    this.#defaultPolicy = validateEgressPolicy(options.defaultPolicy ?? DEFAULT_EGRESS_POLICY);
    this.#logger = options.logger ?? silentLogger;
    this.#run = options.runner ?? runCommand;
  }

  /**
   * Settles the egress interface (turning on forwarding of replies on it if needed, see
   * host-forwarding.ts), forgets connections an earlier server tracked for the pool's
   * block, and starts filling the pool in the background. acquire() calls it when needed.
   */
  async start(): Promise<void> {
    this.#checkOpen();
    this.#refill(await this.#ready());
  }

  /** The names this pool gives its namespaces, host veths and host rules. */
  get names(): SlotNames {
    return this.#names;
  }

  /**
   * Removes every namespace, host veth and host rule of this pool's names that the pool does
   * not own (what an earlier server with these names left). Other names are not touched.
   */
  async cleanupStale(): Promise<StaleCleanupReport> {
    const report = await cleanupStaleSlots(this.#run, this.#names, this.#taken);
    this.#foreign.clear();
    if (report.netns.length + report.links.length + report.hostRules > 0) {
      this.#logger.info({ ...report }, "network.stale_removed");
    }
    await this.#sweepConntrack(report);
    return report;
  }

  /**
   * Forgets the host's connections an earlier server's slots left: the whole block when no
   * slot was taken back (adopt), else those of each stale slot removed only, so that the
   * connections of guests that ran on through the restart stay tracked (their NAT bindings,
   * the proxy's connections to envd).
   */
  async #sweepConntrack(report?: StaleCleanupReport): Promise<void> {
    if (this.#conntrackSwept) return;
    this.#conntrackSwept = true;
    if (this.#taken.size === 0) {
      await flushHostConntrack(this.#run, formatCidr(this.#base));
      return;
    }
    const stale = new Set<number>(report?.indexes ?? []);
    for (const index of stale) {
      const { hostAddress } = slotAddresses(this.#base, index, this.#names);
      await flushHostConntrack(this.#run, hostAddress);
    }
  }

  /**
   * Takes back the slot in namespace `netns` for a guest that ran on while the server was
   * away (a VM the keeper held): checked and set up again (NetworkSlot.adopt) with `policy`,
   * and in use from now on. Before cleanupStale, which then keeps it. A slot that cannot be
   * taken back is left to cleanupStale.
   */
  async adopt(netns: string, policy: EgressPolicy, hold?: string): Promise<NetworkSlot> {
    const wanted = validateEgressPolicy(policy);
    this.#checkOpen();
    const index = slotIndexIn(this.#names.netnsPrefix, netns);
    if (index === undefined || index < 1 || index > maxSlotIndex(this.#base))
      throw new WarrenError("invalid_argument", `${netns} is no slot of this pool`);
    if (this.#taken.has(index))
      throw new WarrenError("conflict", `network slot ${index} is taken already`);
    this.#taken.add(index);
    try {
      const slot = await NetworkSlot.adopt(await this.#ready(), index, wanted, hold);
      this.#inUse.add(slot);
      this.#logger.info({ slot: index }, "network.slot_adopted");
      return slot;
    } catch (err) {
      this.#taken.delete(index);
      throw err;
    }
  }

  /**
   * Hands out a slot with `policy` (default: the pool's default policy). Takes an idle slot
   * or creates one; when only the refill's slot in the making stands at maxSlots, waits for
   * it (one creation, each command of which is bounded). Throws WarrenError
   * resource_exhausted when maxSlots are in use, and EgressPolicyError (before touching
   * anything) for a bad policy.
   */
  async acquire(policy?: EgressPolicy): Promise<NetworkSlot> {
    const wanted = policy ? validateEgressPolicy(policy) : this.#defaultPolicy;
    this.#checkOpen();
    const settings = await this.#ready();
    const slot = await this.#take(settings, wanted);
    this.#inUse.add(slot);
    try {
      if (!sameEgressPolicy(slot.policy, wanted)) await slot.setPolicy(wanted);
      this.#checkOpen();
    } catch (err) {
      this.#inUse.delete(slot);
      await this.#destroy(slot);
      throw err;
    }
    this.#refill(settings);
    return slot;
  }

  /**
   * Takes back a slot whose sandbox ended (its VMM must have exited): resets its policy and
   * keeps it idle, or removes it when the pool is full, closed, or the reset fails. The slot
   * is the pool's again at once; a caller need not wait for the reset (close() does).
   */
  release(given: Slot): Promise<void> {
    const slot = given as NetworkSlot;
    if (!this.#inUse.delete(slot)) {
      return Promise.reject(
        new WarrenError(
          "invalid_argument",
          `network slot ${slot.index} is not in use from this pool`,
        ),
      );
    }
    const releasing = this.#reclaim(slot);
    this.#releasing.add(releasing);
    void releasing.finally(() => this.#releasing.delete(releasing)).catch(() => {});
    return releasing;
  }

  async #reclaim(slot: NetworkSlot): Promise<void> {
    await this.#quiet();
    if (slot.destroyed || this.#closed || this.#idle.length >= this.#size) {
      await this.#destroy(slot);
      return;
    }
    try {
      if (!sameEgressPolicy(slot.policy, this.#defaultPolicy))
        await slot.setPolicy(this.#defaultPolicy);
      // The next tenant inherits nothing of this one's connections.
      await slot.forgetConnections();
    } catch (err) {
      this.#logger.warn({ slot: slot.index, err }, "network.slot_reset_failed");
      await this.#destroy(slot);
      return;
    }
    if (this.#closed) await this.#destroy(slot);
    else this.#idle.push(slot);
  }

  /**
   * A second before a released slot is reset, cut short by close(): the reset's commands are
   * spawned from the server's process, whose event loop each spawn holds for milliseconds —
   * measured, a resume straight after a pause lost ~50 ms to them. Its sandbox's next start
   * takes another slot meanwhile.
   */
  #quiet(): Promise<void> {
    if (this.#closed || this.#reclaimDelayMs <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#waking.delete(done);
        resolve();
      };
      const timer = setTimeout(done, this.#reclaimDelayMs);
      this.#waking.add(done);
    });
  }

  /**
   * Removes every slot, idle and in use; with `keepInUse`, the slots in use stay on the host
   * as they are (their guests run on in the keeper, for the next server to adopt). The pool
   * cannot be used afterwards.
   */
  async close(options: { keepInUse?: boolean } = {}): Promise<void> {
    this.#closed = true;
    for (const wake of [...this.#waking]) wake();
    await this.#refilling;
    await Promise.allSettled(this.#releasing);
    const kept = options.keepInUse ? [...this.#inUse] : [];
    const slots = [...this.#idle.splice(0), ...this.#inUse].filter((s) => !kept.includes(s));
    this.#inUse.clear();
    const results = await Promise.allSettled(slots.map((s) => this.#destroy(s)));
    const failed = results.find((r) => r.status === "rejected");
    if (failed) throw (failed as PromiseRejectedResult).reason;
  }

  /** Counts, for metrics and tests. */
  get stats(): { idle: number; inUse: number; total: number } {
    return { idle: this.#idle.length, inUse: this.#inUse.size, total: this.#taken.size };
  }

  #ready(): Promise<SlotSettings> {
    this.#settings ??= this.#resolveSettings().catch((err: unknown) => {
      this.#settings = undefined; // try again on the next call
      throw err;
    });
    return this.#settings;
  }

  async #resolveSettings(): Promise<SlotSettings> {
    const egressInterface =
      this.#options.egressInterface ?? (await defaultRouteInterface(this.#run));
    if (!egressInterface) this.#logger.warn({}, "network.no_egress_interface");
    else {
      const forwarding = await enableEgressForwarding(this.#run, egressInterface);
      if (forwarding === "enabled") {
        this.#logger.info({ egressInterface }, "network.egress_forwarding_enabled");
      } else if (forwarding === "missing") {
        this.#logger.warn({ egressInterface }, "network.egress_interface_missing");
      }
    }
    // The block is this pool's alone: whatever is tracked in it was left by an earlier
    // server's slots (destroy() forgets its own as it goes). Not while slots are being taken
    // back: cleanupStale then forgets only the stale slots'.
    if (this.#taken.size === 0) await this.#sweepConntrack();
    return {
      base: this.#base,
      names: this.#names,
      tapOwner: this.#options.tapOwner,
      egressInterface,
      serverUid: this.#options.serverUid ?? process.getuid?.() ?? 0,
      run: this.#run,
      gates:
        this.#options.gates ??
        inProcessGates({
          resolve: this.#options.resolve ?? hostResolve,
          ...(this.#options.interception && { interception: this.#options.interception }),
          logger: this.#logger,
        }),
      logger: this.#logger,
    };
  }

  /** An idle slot, a new one, or the one the refill is making when it holds the last index. */
  async #take(settings: SlotSettings, policy: EgressPolicy): Promise<NetworkSlot> {
    for (;;) {
      const idle = this.#idle.shift();
      if (idle) return idle;
      if (!this.#making || this.#taken.size < this.#maxSlots) {
        return this.#create(settings, policy);
      }
      // Its slot goes idle when made (or its index comes free when it fails): look again.
      await this.#making.catch(() => {});
      this.#checkOpen();
    }
  }

  async #create(settings: SlotSettings, policy = this.#defaultPolicy): Promise<NetworkSlot> {
    for (;;) {
      const index = this.#freeIndex();
      this.#taken.add(index);
      const started = performance.now();
      try {
        const slot = await NetworkSlot.create(settings, index, policy);
        this.#logger.info({ slot: index, durationMs: elapsed(started) }, "network.slot_created");
        return slot;
      } catch (err) {
        this.#taken.delete(index);
        if (!(err instanceof SlotTakenError)) throw err;
        // Someone else's (until cleanupStale removes it): leave it alone, use another index.
        this.#foreign.add(index);
        this.#logger.warn({ slot: index }, "network.slot_taken");
      }
    }
  }

  async #destroy(slot: NetworkSlot): Promise<void> {
    const started = performance.now();
    try {
      await slot.destroy();
      this.#taken.delete(slot.index);
      this.#logger.info(
        { slot: slot.index, durationMs: elapsed(started) },
        "network.slot_destroyed",
      );
    } catch (err) {
      // The index stays taken: its leftovers must not be mistaken for a new slot's.
      this.#logger.warn({ slot: slot.index, err }, "network.slot_destroy_failed");
      throw err;
    }
  }

  #freeIndex(): number {
    if (this.#taken.size < this.#maxSlots) {
      for (let index = 1; index <= maxSlotIndex(this.#base); index++) {
        if (!this.#taken.has(index) && !this.#foreign.has(index)) return index;
      }
    }
    throw new WarrenError("network_exhausted", `all ${this.#maxSlots} network slots are in use`);
  }

  /** Keeps `size` idle slots, one creation at a time, in the background. */
  #refill(settings: SlotSettings): void {
    if (this.#refilling || this.#closed) return;
    const loop = async () => {
      while (!this.#closed && this.#idle.length < this.#size && this.#taken.size < this.#maxSlots) {
        this.#making = this.#create(settings);
        let slot: NetworkSlot;
        try {
          slot = await this.#making;
        } finally {
          // In the same step as the push below: a waiting acquire sees the slot or the maker.
          this.#making = undefined;
        }
        if (this.#closed) await this.#destroy(slot);
        else this.#idle.push(slot);
      }
    };
    this.#refilling = loop()
      .catch((err: unknown) => this.#logger.warn({ err }, "network.refill_failed"))
      .finally(() => {
        this.#refilling = undefined;
      });
  }

  #checkOpen(): void {
    if (this.#closed) throw new WarrenError("unavailable", "the network slot pool is closed");
  }
}

function checkCount(name: string, value: number, capacity: number): number {
  if (!Number.isInteger(value) || value < 0 || value > capacity) {
    throw new WarrenError(
      "invalid_argument",
      `${name} must be an integer from 0 to ${capacity}, got ${value}`,
    );
  }
  return value;
}

function isId(value: number): boolean {
  return Number.isInteger(value) && value >= 0;
}

function elapsed(started: number): number {
  return Math.round((performance.now() - started) * 10) / 10;
}
