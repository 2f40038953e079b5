import { randomBytes } from "node:crypto";
import { rename, rm } from "node:fs/promises";
import type { SandboxRow } from "../../catalog/index.js";
import { type EgressPolicy, type Slot, sameEgressPolicy } from "../../network/index.js";
import { crashPoint } from "../../shared/crash-point.js";
import { type Logger, WarrenError } from "../../shared/index.js";
import { phase } from "../../shared/phases.js";
import type { Vm, VmSpec } from "../../vmm/index.js";
import { runtimeDir } from "../layout.js";
import type { NodeDrivers } from "../node-drivers.js";
import type { WarmVm } from "../pool/warm-pool.js";
import type { SandboxVolumeMount } from "../types.js";
import { guestSpec } from "../vm-spec.js";
import type { KeptVmm } from "./kept-vmms.js";
import { configOf, type LiveSandbox } from "./live-sandbox.js";

/**
 * Serves volumes to the guest of a slot (the volumes' NFS server, listening inside the
 * slot's namespace on the gateway's VOLUME_NFS_PORT), until closed. NFSv3 keeps no state
 * on the server: a guest whose VM moved to another slot (resume, fork) carries on with a
 * new server there.
 */
export interface VolumeServer {
  /** Refused (volume_not_found) for a volume that is gone or not `teamId`'s. */
  serve(
    slot: Slot,
    volumeIds: readonly string[],
    teamId: string,
  ): Promise<{ close(): Promise<void> }>;
}

/** A cold boot's envd answering, from QEMU's start: ~3.5 s idle under TCG, far more under load. */
const BOOT_DEADLINE_MS = 180_000;

export interface SandboxVmsOptions extends NodeDrivers {
  readonly logger: Logger;
  /** How long a start or resume waits for envd to answer /init. */
  readonly envdDeadlineMs: number;
  /** Where a snapshot's files are on this node (Snapshots.localDir). */
  readonly snapshotDir: (snapshotId: string) => Promise<string>;
  /** Serves sandboxes' volumes; unset: a sandbox with volumes cannot start here. */
  readonly volumes?: VolumeServer;
  /** Installed in every guest's trust store at /init (the node's egress CA, PEM). */
  readonly guestCaCertificate?: string;
}

/**
 * The machinery under a sandbox: bringing its VM up in a network slot (from a pooled VMM or
 * a fresh restore), handing the guest its settings, and giving everything back. It keeps
 * `live.vm` and `live.slot` current, so that a failure half-way leaves exactly what
 * `release()` cleans up.
 */
export class SandboxVms {
  readonly #o: SandboxVmsOptions;
  /** Work a release leaves running after it returns (a slot's reset, a directory's removal). */
  readonly #background = new Set<Promise<void>>();
  /** Volume servers closing, by slot: the next one there waits for the port. */
  readonly #volumesClosing = new Map<Slot, Promise<void>>();

  constructor(options: SandboxVmsOptions) {
    this.#o = options;
  }

  /** Once what earlier releases left running in the background has finished. */
  async settled(): Promise<void> {
    while (this.#background.size > 0) await Promise.all([...this.#background]);
  }

  #inBackground(work: Promise<void>): void {
    const tracked = work.finally(() => this.#background.delete(tracked));
    this.#background.add(tracked);
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
        await phase("network.policy", () => warm.slot.setPolicy(policy));
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
  restore(
    live: LiveSandbox,
    snapshotId: string,
    policy: EgressPolicy,
    signal?: AbortSignal,
  ): Promise<Vm> {
    return this.#start(live, snapshotId, policy, signal, (dir, spec) =>
      this.#o.driver.restore(dir, spec),
    );
  }

  /**
   * A new VMM in a new slot, cold-booted on the snapshot's disk (a filesystem-only resume):
   * ready once its fresh envd answers, which then takes /init like a restored one.
   */
  async reboot(
    live: LiveSandbox,
    snapshotId: string,
    policy: EgressPolicy,
    signal?: AbortSignal,
  ): Promise<Vm> {
    const vm = await this.#start(live, snapshotId, policy, signal, (dir, spec) =>
      this.#o.driver.bootFromSnapshot(dir, spec),
    );
    // A fresh envd numbers its log lines from 1 again.
    if (live.envdLog) live.envdLog.seq = 0;
    await phase("guest.boot", () =>
      this.#o.agent.waitForHealth((live.slot as Slot).hostAddress, {
        deadlineMs: BOOT_DEADLINE_MS,
        exited: vm.exited,
        signal,
      }),
    );
    return vm;
  }

  async #start(
    live: LiveSandbox,
    snapshotId: string,
    policy: EgressPolicy,
    signal: AbortSignal | undefined,
    start: (dir: string, spec: VmSpec) => Promise<Vm>,
  ): Promise<Vm> {
    const dir = await this.#o.snapshotDir(snapshotId);
    live.slot = await phase("network.slot", () => this.#o.slots.acquire(policy));
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
    live.vm = await start(dir, spec);
    return live.vm;
  }

  /**
   * Writes what the guest holds in its page cache to its disk (a filesystem-only pause is
   * about to keep the disk alone). Best effort: a guest that does not answer keeps what its
   * own flusher wrote.
   */
  async syncGuest(live: LiveSandbox): Promise<void> {
    if (!live.slot) return;
    const { hostAddress } = live.slot;
    await phase("guest.sync", () =>
      this.#o.agent.sync(hostAddress, live.row.envdAccessToken, live.guestCalls?.signal),
    ).catch((err: unknown) =>
      this.#o.logger.warn({ sandboxId: live.row.id, err }, "sandbox.sync_failed"),
    );
  }

  /**
   * envd's /init in the started VM: the sandbox's env vars and access token, and the clock.
   * `presentToken`: the token the guest's envd holds now (a fork child's is its source's).
   */
  async initGuest(live: LiveSandbox, presentToken?: string, signal?: AbortSignal): Promise<void> {
    if (!live.slot) throw new WarrenError("internal", `sandbox ${live.row.id} has no slot`);
    const { hostAddress, gateway } = live.slot;
    const mounts = configOf(live.row).volumeMounts ?? [];
    await this.serveVolumes(live);
    await phase("guest.init", () =>
      this.#o.agent.init(
        hostAddress,
        {
          envVars: guestEnvVars(live.row),
          accessToken: live.row.envdAccessToken ?? "",
          ...(this.#o.guestCaCertificate && { caCertificates: this.#o.guestCaCertificate }),
          ...(mounts.length > 0 && {
            volumeMounts: mounts.map((m) => ({
              nfs_target: `${gateway}:/${m.volumeId}`,
              path: m.path,
            })),
          }),
        },
        {
          token: presentToken ?? live.row.envdAccessToken,
          deadlineMs: this.#o.envdDeadlineMs,
          signal,
        },
      ),
    );
  }

  /** Gives back what a running VM holds: VMM, slot, runtime dir, capacity. */
  async release(live: LiveSandbox): Promise<void> {
    await this.releaseVm(live);
    live.releaseTeam?.();
    live.releaseNode?.();
    live.releaseTeam = undefined;
    live.releaseNode = undefined;
  }

  /** VMM, slot and runtime dir back; the capacity stays reserved, for the start that follows. */
  async releaseVm(live: LiveSandbox): Promise<void> {
    const { vm, slot } = live;
    this.#detach(live);
    await this.#giveBack(live.row.id, vm, slot);
  }

  /**
   * A paused sandbox's VMM, stopped after its capture, taken from it with its slot and its
   * share of the node's capacity (KeptVmms); the team's share is given back, as a pause does.
   */
  park(live: LiveSandbox, vm: Vm, snapshotId: string): KeptVmm {
    const { slot, releaseNode } = live;
    if (!slot || !releaseNode)
      throw new WarrenError("internal", `sandbox ${live.row.id} has no slot or capacity to keep`);
    this.#detach(live);
    live.releaseTeam?.();
    live.releaseTeam = undefined;
    live.releaseNode = undefined;
    return { sandboxId: live.row.id, snapshotId, vm, slot, releaseNode };
  }

  /** A kept VMM back into its sandbox: the resume's `cont` and /init come next. */
  unpark(live: LiveSandbox, kept: KeptVmm): void {
    live.vm = kept.vm;
    live.slot = kept.slot;
    live.releaseNode = kept.releaseNode;
    live.guestCalls = new AbortController();
  }

  /** Gives a kept VMM's VM and slot back (its capacity is KeptVmms'). */
  releaseKept(kept: KeptVmm): Promise<void> {
    return this.#giveBack(kept.sandboxId, kept.vm, kept.slot);
  }

  /**
   * The NFS server for the sandbox's volumes in its slot, if it mounts any: before /init
   * mounts them (a restored guest's mounts reconnect to it on their own), and for a guest
   * re-adopted after a restart (its `hard` mounts retried meanwhile). Once per slot: a kept
   * VMM resumed in its old slot gets a new one, its old one went with the pause.
   */
  async serveVolumes(live: LiveSandbox): Promise<void> {
    const mounts: readonly SandboxVolumeMount[] = configOf(live.row).volumeMounts ?? [];
    const slot = live.slot;
    if (live.volumes || mounts.length === 0 || !slot) return;
    const server = this.#o.volumes;
    if (!server) throw new WarrenError("invalid_argument", "volumes are not served on this node");
    const ids = mounts.map((m) => m.volumeId);
    await this.#volumesClosing.get(slot);
    live.volumes = await phase("volumes.serve", () => server.serve(slot, ids, live.row.teamId));
  }

  /** Calls to its guest still in flight are aborted: nothing waits on a guest that is going. */
  #detach(live: LiveSandbox): void {
    live.guestCalls?.abort(new WarrenError("guest_unavailable", `sandbox ${live.row.id} stopped`));
    live.guestCalls = undefined;
    // Its guest is stopped or gone: nothing is in flight that a close would cut short.
    const { volumes, slot } = live;
    live.volumes = undefined;
    if (volumes && slot) {
      const closing = volumes
        .close()
        .catch((err: unknown) =>
          this.#o.logger.warn({ sandboxId: live.row.id, err }, "volumes.close_failed"),
        )
        .finally(() => this.#volumesClosing.delete(slot));
      this.#volumesClosing.set(slot, closing);
      this.#inBackground(closing);
    }
    live.vm = undefined;
    live.slot = undefined;
  }

  async #giveBack(sandboxId: string, vm: Vm | undefined, slot: Slot | undefined): Promise<void> {
    const log = this.#o.logger;
    if (vm) {
      await phase("vmm.destroy", () => vm.destroy()).catch((err: unknown) =>
        log.warn({ err }, "vm.destroy_failed"),
      );
    }
    await phase("jail.cleanup", () => this.#discard(runtimeDir(this.#o.layout, sandboxId)));
    // The slot's reset (its policy, its connections forgotten: several commands) need not
    // hold up the caller: the pool finishes it before the slot's next tenant, or at close.
    if (slot) {
      this.#inBackground(
        this.#o.slots
          .release(slot)
          .catch((err: unknown) => log.warn({ err }, "network.slot_release_failed")),
      );
    }
  }

  /**
   * Takes a runtime directory out of the way at once (its sandbox may start again right
   * away under the same name) and removes it in the background; whatever a crash leaves is
   * swept at the next start (recovery).
   */
  async #discard(dir: string): Promise<void> {
    const gone = `${dir}.gone-${randomBytes(6).toString("hex")}`;
    try {
      await rename(dir, gone);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
      throw err;
    }
    this.#inBackground(
      rm(gone, { recursive: true, force: true }).catch((err: unknown) =>
        this.#o.logger.warn({ err, dir: gone }, "sandbox.runtime_dir_removal_failed"),
      ),
    );
  }
}

/**
 * The env vars every process in the guest sees: the create's, then E2B's own (which they
 * cannot override): the sandbox's id (a fork child's own) and its template's. envd adds
 * `E2B_SANDBOX=true`.
 */
function guestEnvVars(row: SandboxRow): Record<string, string> {
  return { ...row.envVars, E2B_SANDBOX_ID: row.id, E2B_TEMPLATE_ID: row.templateId };
}
