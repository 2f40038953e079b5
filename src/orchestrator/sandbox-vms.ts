import { rm } from "node:fs/promises";
import type { Catalog } from "../catalog/index.js";
import type { GuestArtifacts } from "../images/index.js";
import { type EgressPolicy, type SlotPool, sameEgressPolicy } from "../network/index.js";
import { crashPoint } from "../shared/crash-point.js";
import { type Logger, WarrenError } from "../shared/index.js";
import type { Vm, VmmDriver } from "../vmm/index.js";
import type { GuestAgent } from "./guest-agent.js";
import { runtimeDir, type StateLayout } from "./layout.js";
import type { LiveSandbox } from "./live-sandbox.js";
import { guestSpec } from "./vm-spec.js";
import type { WarmVm } from "./warm-pool.js";

export interface SandboxVmsOptions {
  readonly catalog: Catalog;
  readonly driver: VmmDriver;
  readonly slots: SlotPool;
  readonly agent: GuestAgent;
  readonly images: GuestArtifacts;
  readonly layout: StateLayout;
  readonly logger: Logger;
  /** How long a start or resume waits for envd to answer /init. */
  readonly envdDeadlineMs: number;
  /** Where a snapshot's files are on this node (SnapshotStore.localDir). */
  readonly snapshotDir: (snapshotId: string) => Promise<string>;
}

/**
 * The machinery under a sandbox: bringing its VM up in a network slot (from a pooled VMM or
 * a fresh restore), handing the guest its settings, and giving everything back. It keeps
 * `live.vm` and `live.slot` current, so that a failure half-way leaves exactly what
 * `release()` cleans up.
 */
export class SandboxVms {
  readonly #o: SandboxVmsOptions;

  constructor(options: SandboxVmsOptions) {
    this.#o = options;
  }

  /** A pooled VMM: its slot gets the sandbox's egress policy, then the guest continues. */
  async startWarm(
    live: LiveSandbox,
    warm: WarmVm,
    policy: EgressPolicy,
    signal?: AbortSignal,
  ): Promise<Vm> {
    live.slot = warm.slot;
    live.guestCalls = new AbortController();
    try {
      signal?.throwIfAborted();
      if (!sameEgressPolicy(warm.slot.policy, policy)) {
        await warm.slot.setPolicy(policy);
        crashPoint("sandbox-vms.start-warm.after-policy");
      }
      signal?.throwIfAborted();
    } catch (err) {
      await warm.prepared.discard();
      throw err;
    }
    live.vm = await warm.prepared.start();
    return live.vm;
  }

  /** A new VMM in a new slot, restored from the snapshot. */
  async restore(
    live: LiveSandbox,
    snapshotId: string,
    policy: EgressPolicy,
    signal?: AbortSignal,
  ): Promise<Vm> {
    const dir = await this.#o.snapshotDir(snapshotId);
    live.slot = await this.#o.slots.acquire(policy);
    crashPoint("sandbox-vms.restore.after-slot");
    live.guestCalls = new AbortController();
    signal?.throwIfAborted();
    const spec = guestSpec({
      id: live.row.id,
      slot: live.slot,
      images: this.#o.images,
      shape: { vcpus: live.row.vcpus, memoryMiB: live.row.memoryMiB },
      runtimeDir: runtimeDir(this.#o.layout, live.row.id),
    });
    live.vm = await this.#o.driver.restore(dir, spec);
    return live.vm;
  }

  /**
   * envd's /init in the started VM: the sandbox's env vars and access token, and the clock.
   * `presentToken`: the token the guest's envd holds now (a fork child's is its source's).
   */
  async initGuest(live: LiveSandbox, presentToken?: string, signal?: AbortSignal): Promise<void> {
    if (!live.slot) throw new WarrenError("internal", `sandbox ${live.row.id} has no slot`);
    await this.#o.agent.init(
      live.slot.hostAddress,
      { envVars: { ...live.row.envVars }, accessToken: live.row.envdAccessToken ?? "" },
      {
        token: presentToken ?? live.row.envdAccessToken,
        deadlineMs: this.#o.envdDeadlineMs,
        signal,
      },
    );
  }

  /**
   * Gives back what a running VM holds: VMM, slot, runtime dir, capacity. Calls to its guest
   * still in flight are aborted first: nothing waits on a guest that is going.
   */
  async release(live: LiveSandbox): Promise<void> {
    const { vm, slot } = live;
    live.guestCalls?.abort(new WarrenError("guest_unavailable", `sandbox ${live.row.id} stopped`));
    live.guestCalls = undefined;
    live.vm = undefined;
    live.slot = undefined;
    const log = this.#o.logger;
    if (vm) await vm.destroy().catch((err: unknown) => log.warn({ err }, "vm.destroy_failed"));
    await rm(runtimeDir(this.#o.layout, live.row.id), { recursive: true, force: true });
    if (slot) {
      await this.#o.slots
        .release(slot)
        .catch((err: unknown) => log.warn({ err }, "network.slot_release_failed"));
    }
    live.releaseCapacity?.();
    live.releaseCapacity = undefined;
  }
}
