import type { EgressPolicy } from "./egress-policy.js";

/**
 * One sandbox's network as the orchestrator sees it: where QEMU attaches the guest's NIC,
 * where the host reaches the guest, and its egress policy (changeable while the guest runs).
 */
export interface Slot {
  /** Network namespace QEMU opens the tap in. */
  readonly netns: string;
  readonly tapName: string;
  /** Guest address and gateway, the same in every slot (docs/guest-boot.md). */
  readonly guestAddress: string;
  readonly gateway: string;
  /** Where the host reaches the guest; forwarded to the guest address. */
  readonly hostAddress: string;
  readonly policy: EgressPolicy;
  setPolicy(policy: EgressPolicy): Promise<void>;
}

/**
 * The network seam: the orchestrator takes slots for its VMs from a pool and gives them back.
 * `NetnsSlotPool` implements it with namespaces, taps, veths and iptables; tests use an
 * in-memory fake.
 */
export interface SlotPool {
  /** Gets ready to hand out slots (host forwarding, egress interface, first idle slots). */
  start(): Promise<void>;
  /**
   * Takes back the slot in namespace `netns` for a guest that kept running while the server
   * was away (its VM re-adopted at start), with `policy`; before cleanupStale. In use from
   * then on, released as any other. `hold`: a path to the namespace that outlived this
   * server's mount of it (the keeper's descriptor), mounted again where that mount is gone.
   */
  adopt(netns: string, policy: EgressPolicy, hold?: string): Promise<Slot>;
  /** Removes what an earlier run of this server left on the host (but adopted slots). */
  cleanupStale(): Promise<unknown>;
  /** A slot with `policy` (default: the pool's); resource_exhausted when none is left. */
  acquire(policy?: EgressPolicy): Promise<Slot>;
  /**
   * Gives a slot back; it is reset to the default policy or removed before anyone gets it
   * again. A caller need not wait for that: close() does.
   */
  release(slot: Slot): Promise<void>;
  /**
   * Removes every slot; with `keepInUse`, those in use stay as they are (a server stopping
   * with WARREN_ON_STOP=detach: their guests run on, for the next server to adopt).
   */
  close(options?: { keepInUse?: boolean }): Promise<void>;
}
