import { EventEmitter } from "node:events";
import type { Catalog, SandboxPatch, SandboxRow, TeamAdmit } from "../../catalog/index.js";
import { validateEgressPolicy } from "../../network/index.js";
import { crashPoint } from "../../shared/crash-point.js";
import { type Logger, WarrenError } from "../../shared/index.js";
import { addPhase, phase } from "../../shared/phases.js";
import type { Vm } from "../../vmm/index.js";
import type { Capacity } from "../capacity.js";
import type { DiskSpace } from "../disk-space.js";
import type { LifecycleEvents } from "../lifecycle-events.js";
import type { PoolTemplate, WarmPool, WarmVm } from "../pool/warm-pool.js";
import type { Snapshots } from "../snapshots/snapshots.js";
import type { Permit, StartQueue, StartTicket } from "../start-queue.js";
import type { PauseOptions, ResumeOptions, SandboxInfo } from "../types.js";
import type { KeptVmm, KeptVmms } from "./kept-vmms.js";
import { configOf, type LiveSandbox, sandboxInfo } from "./live-sandbox.js";
import { egressPolicyOf } from "./network-config.js";
import type { SandboxTable } from "./sandbox-table.js";
import type { SandboxVms } from "./sandbox-vms.js";
import type { TeamQuotas } from "./team-quotas.js";
import { TtlTimers } from "./ttl-timers.js";

export interface LifecycleOptions {
  readonly catalog: Catalog;
  readonly table: SandboxTable;
  readonly capacity: Capacity;
  readonly quotas: TeamQuotas;
  /** Free-disk admission of new sandboxes (their disk layers grow in the data dir). */
  readonly disk: DiskSpace;
  readonly vms: SandboxVms;
  readonly pool: WarmPool;
  readonly snapshots: Snapshots;
  /** Paused sandboxes' VMMs kept stopped for a quick resume. */
  readonly kept: KeptVmms;
  /** Where VM starts wait their turn (creates, resumes, fork children); bounded, 429 past it. */
  readonly starts: StartQueue;
  /** How long a start keeps its permit while its guest has not answered /init. */
  readonly startPermitLeaseMs: number;
  readonly logger: Logger;
  readonly events: LifecycleEvents;
}

/** After a failed capture, how long the VMM has to be seen exiting before it counts as alive. */
const EXIT_GRACE_MS = 200;

/**
 * The sandbox state machine: creating → running ⇄ (pausing → paused → resuming) → killing →
 * gone. Every transition runs under the sandbox's lock (SandboxTable) and is written to the
 * catalog before the caller hears of it; a failure half-way gives back everything taken.
 */
export class Lifecycle {
  readonly #o: LifecycleOptions;
  readonly #log: Logger;
  readonly #events: LifecycleEvents;
  readonly #starts: StartQueue;
  readonly #stopped = new EventEmitter();
  readonly ttl: TtlTimers;

  constructor(options: LifecycleOptions) {
    this.#o = options;
    this.#log = options.logger;
    this.#events = options.events;
    this.#starts = options.starts;
    this.ttl = new TtlTimers({
      table: options.table,
      logger: options.logger,
      onExpired: (live) => {
        const { lifecycle } = configOf(live.row);
        return lifecycle.onTimeout === "pause"
          ? this.pause(live, { keepMemory: lifecycle.keepMemory !== false })
          : this.teardown(live, "timeout");
      },
    });
  }

  /**
   * Admits a new sandbox (capacity, catalog row) and starts it from its row's snapshot; a
   * kill meanwhile aborts the start, which then cleans up and fails with sandbox_killed.
   * `presentToken`: the token the captured envd still holds (a fork child's source's).
   * `template`: a create from a template, its demand for the warm pool (fork children start
   * from one-off captures, never pooled). `patient`: a fork's child — its capture is paid
   * for and its client asked for all of them, so the start queue never sheds it on an
   * estimate, only at its bound.
   */
  async launch(
    fresh: SandboxRow,
    how: { presentToken?: string; template?: PoolTemplate; patient?: boolean } = {},
  ): Promise<SandboxInfo> {
    const { presentToken, template } = how;
    const { catalog, table, capacity, pool, quotas } = this.#o;
    const snapshotId = fresh.snapshotId as string;
    this.#o.disk.admit("creating a sandbox");
    const limits = await quotas.limitsOf(fresh);
    // The team's share first: a team over its quota takes nothing from the node or the pool.
    const releaseTeam = quotas.reserve(fresh, limits, { newDisk: true });
    const warm = template && pool.take(template);
    crashPoint("lifecycle.launch.after-take");
    // A warmed VMM brings its id (its runtime dir is named after it) and its capacity share.
    const row = warm ? { ...fresh, id: warm.id } : fresh;
    let releaseNode: () => void;
    let ticket: StartTicket | undefined;
    try {
      releaseNode = warm ? warm.releaseCapacity : capacity.reserve(row);
    } catch (err) {
      releaseTeam();
      throw err;
    }
    try {
      // Its place in the start queue is taken now, in the order creates arrived.
      ticket = warm ? undefined : this.#starts.enter({ patient: how.patient === true });
    } catch (err) {
      releaseTeam();
      releaseNode();
      throw err;
    }
    const live: LiveSandbox = {
      row,
      releaseTeam,
      releaseNode,
      abort: new AbortController(),
      metrics: [],
    };
    try {
      // Across the cluster: the team's sandboxes on every node, counted under its lock.
      await catalog.insertSandbox(row, quotas.admission(row, limits, { newDisk: true }));
      crashPoint("lifecycle.launch.after-insert");
    } catch (err) {
      releaseTeam();
      ticket?.cancel();
      if (warm) await pool.discard(warm);
      else releaseNode();
      throw err;
    }
    table.add(live);
    this.#events.emit("sandbox.creating", {
      sandboxId: row.id,
      snapshotId,
      pooled: warm !== undefined,
    });
    const started = performance.now();
    await table.serial(row.id, async () => {
      try {
        await this.#startVm(live, snapshotId, { presentToken, warm, ticket });
        await this.update(live, { state: "running" });
        crashPoint("lifecycle.launch.after-running");
        this.ttl.arm(live);
      } catch (err) {
        const killed = live.abort?.signal.aborted === true;
        await this.teardown(live, killed ? "killed" : "failed");
        throw killed
          ? new WarrenError(
              "sandbox_killed",
              `sandbox ${row.id} was killed while it was being created`,
            )
          : err;
      } finally {
        live.abort = undefined;
      }
    });
    const durationMs = Math.round(performance.now() - started);
    // A fork child comes from a one-off capture, a create from a template.
    const from = template ? "template" : "fork";
    await this.#events.emit("sandbox.created", { sandboxId: row.id, snapshotId, from, durationMs });
    return sandboxInfo(live.row);
  }

  /**
   * Under the lock, running: capture to a new snapshot and let the VMM go, or keep it
   * stopped a while (KeptVmms) so that a resume soon after is a bare `cont`. Without memory
   * (filesystem only), the guest's page cache is written out first and the next resume
   * cold-boots from the disk; the capture is the same (its memory is never restored).
   */
  async pause(live: LiveSandbox, options: PauseOptions = {}): Promise<void> {
    const vm = live.vm;
    if (!vm) throw new WarrenError("sandbox_busy", `sandbox ${live.row.id} is not running`);
    const keepMemory = options.keepMemory !== false;
    this.ttl.clear(live.row.id);
    await this.update(live, { state: "pausing" });
    crashPoint("lifecycle.pause.after-pausing");
    if (!keepMemory) await this.#o.vms.syncGuest(live);
    let captured: Awaited<ReturnType<Snapshots["capture"]>>;
    try {
      captured = await this.#o.snapshots.capture(vm, {
        sandboxId: live.row.id,
        parentId: live.row.snapshotId,
        kind: "pause",
        resume: false,
        keepStopped: keepMemory && this.#o.kept.enabled,
        publish: true,
      });
    } catch (err) {
      if (await exitsWithin(vm, EXIT_GRACE_MS)) {
        await this.teardown(live, "lost: pause failed");
      } else {
        await this.update(live, { state: "running" });
        this.ttl.arm(live);
      }
      throw err;
    }
    crashPoint("lifecycle.pause.after-capture");
    const { id: snapshotId, timing } = captured;
    live.vm = undefined;
    this.#stopped.emit("stopped", live.row.id);
    await this.update(live, {
      state: "paused",
      snapshotId,
      config: withPausedMemory(live.row, keepMemory),
    });
    crashPoint("lifecycle.pause.after-paused");
    if (timing.keptStopped) this.#o.kept.keep(this.#o.vms.park(live, vm, snapshotId));
    else await this.#o.vms.release(live);
    crashPoint("lifecycle.pause.after-release");
    await this.#events.emit("sandbox.paused", { sandboxId: live.row.id, keepMemory, ...timing });
  }

  /**
   * Under the lock, paused: restore from its snapshot (or cold-boot from its disk, when it
   * was paused without memory or `reboot` asks) and /init again; its TTL restarts.
   */
  async resume(live: LiveSandbox, timeoutMs: number, options: ResumeOptions = {}): Promise<void> {
    const memoryKept = configOf(live.row).pausedWithoutMemory !== true;
    const reboot = options.reboot === true || !memoryKept;
    const snapshotId = live.row.snapshotId;
    if (!snapshotId) {
      throw new WarrenError("internal", `paused sandbox ${live.row.id} has no snapshot`);
    }
    const { quotas, capacity, kept } = this.#o;
    const limits = await quotas.limitsOf(live.row);
    const releaseTeam = quotas.reserve(live.row, limits, { newDisk: false });
    let parked: KeptVmm | undefined;
    try {
      // A reboot boots afresh from the disk: a kept VMM is of no use to it.
      if (reboot) await kept.drop(live.row.id, "reboot");
      else parked = await kept.take(live.row.id, snapshotId);
      live.releaseNode = parked?.releaseNode ?? capacity.reserve(live.row);
    } catch (err) {
      releaseTeam();
      throw err;
    }
    try {
      // Across the cluster, as a create's insert: a resume on another node counts too.
      await this.update(
        live,
        { state: "resuming" },
        quotas.admission(live.row, limits, { newDisk: false }),
      );
    } catch (err) {
      // Still paused: its kept VMM (and the room it holds) goes back, or the room it took.
      releaseTeam();
      if (parked) kept.keep(parked);
      else live.releaseNode?.();
      live.releaseNode = undefined;
      throw err;
    }
    live.releaseTeam = releaseTeam;
    live.abort = new AbortController();
    const started = performance.now();
    crashPoint("lifecycle.resume.after-resuming");
    try {
      if (parked && !(await this.#continueKept(live, parked))) parked = undefined;
      if (!parked) {
        const from = reboot && memoryKept ? await this.#flushedDisk(live, snapshotId) : snapshotId;
        await this.#startVm(live, from, { reboot });
      }
    } catch (err) {
      const killed = live.abort.signal.aborted;
      live.abort = undefined;
      await this.#o.vms.release(live);
      if (killed) {
        await this.teardown(live, "killed");
        throw new WarrenError(
          "sandbox_killed",
          `sandbox ${live.row.id} was killed while it was resuming`,
        );
      }
      await this.update(live, { state: "paused" });
      throw err;
    }
    live.abort = undefined;
    await this.update(live, {
      state: "running",
      endAt: new Date(Date.now() + timeoutMs).toISOString(),
      config: withPausedMemory(live.row, true),
    });
    crashPoint("lifecycle.resume.after-running");
    this.ttl.arm(live);
    const durationMs = Math.round(performance.now() - started);
    await this.#events.emit("sandbox.resumed", {
      sandboxId: live.row.id,
      durationMs,
      reboot,
      kept: parked !== undefined,
    });
  }

  /**
   * A kept VMM runs again where its pause stopped it (its exit is still watched: the same VM
   * object as before the pause), then takes /init like a restored one: the clock moved on.
   */
  async #continueKept(live: LiveSandbox, parked: KeptVmm): Promise<boolean> {
    const { vms } = this.#o;
    vms.unpark(live, parked);
    try {
      await phase("vmm.cont", () => parked.vm.continue());
    } catch (err) {
      // Its VMM died while kept: the snapshot is whole, restore it instead (the node's
      // share of capacity stays reserved for that).
      this.#log.warn({ sandboxId: live.row.id, err }, "sandbox.kept_vmm_failed");
      await vms.releaseVm(live);
      return false;
    }
    await vms.initGuest(live, undefined, live.abort?.signal);
    live.abort?.signal.throwIfAborted();
    return true;
  }

  /**
   * A reboot of a sandbox paused with its memory: its disk lags what the guest still held in
   * its page cache, so the snapshot is restored once, `sync`ed and captured again, and the
   * reboot stands on that capture. The capacity reserved for the resume stays reserved.
   */
  async #flushedDisk(live: LiveSandbox, snapshotId: string): Promise<string> {
    await this.#startVm(live, snapshotId);
    await this.#o.vms.syncGuest(live);
    const vm = live.vm;
    if (!vm) throw new WarrenError("internal", `sandbox ${live.row.id} has no VM to flush`);
    const { id } = await this.#o.snapshots.capture(vm, {
      sandboxId: live.row.id,
      parentId: snapshotId,
      kind: "pause",
      resume: false,
    });
    await this.#o.vms.releaseVm(live);
    await this.update(live, { snapshotId: id });
    return id;
  }

  /** Under the lock, running: the deadline becomes now + `ttlMs` (setTimeout: may shorten). */
  async replaceDeadline(live: LiveSandbox, ttlMs: number): Promise<void> {
    const endAt = new Date(Date.now() + ttlMs).toISOString();
    await this.update(live, { endAt });
    this.ttl.arm(live);
    await this.#events.emit("sandbox.timeout_set", { sandboxId: live.row.id, endAt });
  }

  /** Under the lock, running: the deadline moves to now + `ttlMs` if that is later (connect, refresh). */
  async extendDeadline(live: LiveSandbox, ttlMs: number): Promise<void> {
    if (Date.now() + ttlMs > Date.parse(live.row.endAt)) await this.replaceDeadline(live, ttlMs);
  }

  /**
   * The end of a sandbox: everything it holds is released, and the snapshots it stood on are
   * deleted unless forks, templates or other sandboxes still use them.
   */
  async teardown(live: LiveSandbox, reason: string): Promise<void> {
    const id = live.row.id;
    const standsOn = live.row.snapshotId;
    this.ttl.clear(id);
    this.#stopped.emit("stopped", id);
    await this.update(live, { state: "killing" }).catch(() => {});
    crashPoint("lifecycle.teardown.after-killing");
    await this.#o.kept.drop(id);
    await this.#o.vms.release(live);
    crashPoint("lifecycle.teardown.after-release");
    await this.update(live, { state: "killed", endedReason: reason, snapshotId: undefined });
    crashPoint("lifecycle.teardown.after-killed");
    await this.#o.snapshots.release(standsOn);
    crashPoint("lifecycle.teardown.after-snapshots");
    this.#o.table.remove(id);
    await this.#events.emit("sandbox.killed", { sandboxId: id, reason });
  }

  /** Writes the patch to the catalog, then to the live row. */
  /** Writes the patch to the catalog (with `admit`, only once the team's quotas admit it). */
  async update(live: LiveSandbox, patch: SandboxPatch, admit?: TeamAdmit): Promise<void> {
    const updated = await phase("orchestrator.catalog", () =>
      this.#o.catalog.updateSandbox(live.row.id, patch, admit),
    );
    live.row = updated ?? {
      ...live.row,
      ...patch,
    };
  }

  /** Sandboxes that stop serving traffic (paused, killed, lost), for the proxy. */
  onStopped(listener: (sandboxId: string) => void): () => void {
    this.#stopped.on("stopped", listener);
    return () => this.#stopped.off("stopped", listener);
  }

  /**
   * Slot, VM from the snapshot, /init: the sandbox answers once this returns. A start waits
   * its turn (`ticket`: the place its create took on arrival; else one taken now), and a kill
   * meanwhile ends the wait.
   */
  async #startVm(
    live: LiveSandbox,
    snapshotId: string,
    how: { presentToken?: string; warm?: WarmVm; ticket?: StartTicket; reboot?: boolean } = {},
  ): Promise<void> {
    const { presentToken, warm, reboot } = how;
    // A pooled VMM only continues: it does not queue behind restores.
    if (warm) return this.#bringUp(live, snapshotId, { presentToken, warm });
    const queued = performance.now();
    const ticket = how.ticket ?? this.#starts.enter();
    let permit: Permit;
    try {
      permit = await untilAborted(ticket.turn(), live.abort?.signal);
    } catch (err) {
      ticket.cancel();
      throw err;
    }
    addPhase("orchestrator.start_queue", performance.now() - queued);
    try {
      this.#o.capacity.starting();
      await this.#bringUp(live, snapshotId, { presentToken, permit, reboot });
    } finally {
      permit.release();
    }
  }

  async #bringUp(
    live: LiveSandbox,
    snapshotId: string,
    how: { presentToken?: string; warm?: WarmVm; permit?: Permit; reboot?: boolean },
  ): Promise<void> {
    const { vms } = this.#o;
    const { presentToken, warm, permit } = how;
    const config = configOf(live.row);
    const policy = validateEgressPolicy(egressPolicyOf(config, live.row.teamId));
    const signal = live.abort?.signal;
    const started = performance.now();
    if (warm) await vms.startWarm(live, warm, policy, signal);
    else if (how.reboot) await vms.reboot(live, snapshotId, policy, signal);
    else await vms.restore(live, snapshotId, policy, signal);
    crashPoint("lifecycle.start.after-vm");
    const vmMs = Math.round(performance.now() - started);
    this.#watchExit(live);
    signal?.throwIfAborted();
    // A guest slow to answer /init uses no host CPU, and may be one whose user replaced envd
    // with a server that never answers: past the lease its permit goes to the next start.
    const lease =
      permit &&
      setTimeout(() => {
        this.#log.warn({ sandboxId: live.row.id }, "sandbox.init_slow_permit_released");
        permit.release();
      }, this.#o.startPermitLeaseMs).unref();
    try {
      await vms.initGuest(live, presentToken, signal);
    } finally {
      clearTimeout(lease);
    }
    crashPoint("lifecycle.start.after-init");
    signal?.throwIfAborted();
    const initMs = Math.round(performance.now() - started) - vmMs;
    this.#events.emit("sandbox.vm_up", {
      sandboxId: live.row.id,
      pooled: warm !== undefined,
      vmMs,
      initMs,
    });
  }

  /**
   * A running sandbox re-adopted at start (its VM reattached from the keeper, its slot taken
   * back) joins the table with its share of the node's and its team's capacity; its VMM's
   * exit is watched and its deadline armed again from its row's end time (one that passed
   * while the server was away expires at once).
   */
  adopt(live: LiveSandbox): void {
    // It runs already: its room is held whatever the limits say now.
    live.releaseNode = this.#o.capacity.hold(live.row);
    live.releaseTeam = this.#o.quotas.reserve(live.row, {}, { newDisk: false });
    this.#o.table.add(live);
    this.#watchExit(live);
    this.ttl.arm(live);
  }

  /** A VMM that dies while its sandbox runs: the sandbox is lost, and says so. */
  #watchExit(live: LiveSandbox): void {
    const vm = live.vm;
    const { table } = this.#o;
    void vm?.exited.then(async (exit) => {
      if (exit.expected || live.vm !== vm) return;
      this.#events.emit("sandbox.vmm_died", { sandboxId: live.row.id, exit });
      await table
        .serial(live.row.id, async () => {
          if (live.vm !== vm || !table.has(live.row.id)) return;
          live.vm = undefined;
          await this.teardown(live, `lost: the VMM exited (${exit.reason})`);
        })
        .catch((err: unknown) => this.#log.error({ err }, "sandbox.cleanup_failed"));
    });
  }
}

/** Whether the VM's process exits within `ms` (after a failed capture: crashed, or alive). */
function exitsWithin(vm: Vm, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    void vm.exited.then(() => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

/** The row's config recording whether its pause kept the memory (absent: it did). */
function withPausedMemory(row: SandboxRow, kept: boolean): Record<string, unknown> {
  const { pausedWithoutMemory: _, ...config } = configOf(row);
  return { ...config, ...(!kept && { pausedWithoutMemory: true }) };
}

/** `promise`, or the signal's reason once it aborts first (a kill while a start waits). */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  signal.throwIfAborted();
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}
