/**
 * FakeSlotPool: a STAND-IN for NetnsSlotPool in orchestrator unit tests. Slots are records
 * (no namespace, tap or rule): each has its own namespace name and host address, which the
 * fake driver and agent use to find the guest behind a slot. It counts what is in use, so a
 * test can check that every slot taken was given back.
 */
import {
  DEFAULT_EGRESS_POLICY,
  type EgressPolicy,
  type Slot,
  type SlotPool,
  validateEgressPolicy,
} from "../../src/network/index.js";
import { GATEWAY_ADDRESS, GUEST_ADDRESS } from "../../src/protocol/index.js";
import { WarrenError } from "../../src/shared/index.js";

export class FakeSlot implements Slot {
  readonly tapName = "tap0";
  readonly guestAddress = GUEST_ADDRESS;
  readonly gateway = GATEWAY_ADDRESS;
  readonly netns: string;
  readonly hostAddress: string;
  policy: EgressPolicy;
  /** How often its rules were rewritten (setPolicy): each is ~20 ms of commands on a node. */
  policyChanges = 0;

  constructor(
    readonly index: number,
    policy: EgressPolicy,
  ) {
    this.netns = `fake-slot-${index}`;
    this.hostAddress = `10.250.${index >> 8}.${index & 255}`;
    this.policy = policy;
  }

  async setPolicy(policy: EgressPolicy): Promise<void> {
    this.policyChanges += 1;
    this.policy = validateEgressPolicy(policy);
  }
}

export class FakeSlotPool implements SlotPool {
  readonly inUse = new Set<FakeSlot>();
  readonly #idle: FakeSlot[] = [];
  #next = 1;
  #closed = false;
  staleCleanups = 0;
  /** Indexes taken back with adopt(). */
  readonly adopted: number[] = [];
  /** In-use slots a close left in place (keepInUse). */
  kept: FakeSlot[] = [];

  constructor(readonly maxSlots = 64) {}

  async start(): Promise<void> {}

  async cleanupStale(): Promise<void> {
    this.staleCleanups += 1;
  }

  async acquire(policy?: EgressPolicy): Promise<FakeSlot> {
    if (this.#closed) throw new WarrenError("unavailable", "the network slot pool is closed");
    const wanted = policy ? validateEgressPolicy(policy) : DEFAULT_EGRESS_POLICY;
    if (this.inUse.size >= this.maxSlots) {
      throw new WarrenError("network_exhausted", `all ${this.maxSlots} network slots are in use`);
    }
    const slot = this.#idle.shift() ?? new FakeSlot(this.#next++, wanted);
    slot.policy = wanted;
    this.inUse.add(slot);
    return slot;
  }

  /** A slot an earlier pool handed out, taken back (its guest ran on through a restart). */
  async adopt(netns: string, policy: EgressPolicy, _hold?: string): Promise<FakeSlot> {
    if (this.#closed) throw new WarrenError("unavailable", "the network slot pool is closed");
    const index = Number(/^fake-slot-(\d+)$/.exec(netns)?.[1]);
    if (!Number.isInteger(index)) throw new WarrenError("invalid_argument", `${netns} is no slot`);
    if ([...this.inUse, ...this.#idle].some((slot) => slot.index === index))
      throw new WarrenError("conflict", `network slot ${index} is taken already`);
    const slot = new FakeSlot(index, validateEgressPolicy(policy));
    this.#next = Math.max(this.#next, index + 1);
    this.inUse.add(slot);
    this.adopted.push(index);
    return slot;
  }

  async release(slot: Slot): Promise<void> {
    const own = slot as FakeSlot;
    if (!this.inUse.delete(own)) {
      throw new WarrenError(
        "invalid_argument",
        `network slot ${own.netns} is not in use from this pool`,
      );
    }
    own.policy = DEFAULT_EGRESS_POLICY;
    this.#idle.push(own);
  }

  /** The slot in use at a host address (how the fake agent reaches a guest). */
  byHost(host: string): FakeSlot | undefined {
    for (const slot of this.inUse) if (slot.hostAddress === host) return slot;
    return undefined;
  }

  async close(options: { keepInUse?: boolean } = {}): Promise<void> {
    this.#closed = true;
    this.kept = options.keepInUse ? [...this.inUse] : [];
    this.inUse.clear();
    this.#idle.length = 0;
  }
}
