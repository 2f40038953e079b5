import { EventEmitter } from "node:events";
import type { Catalog, SandboxPatch, SandboxRow, TemplateRow } from "../catalog/index.js";
import type { GuestArtifacts } from "../images/index.js";
import { type Slot, type SlotPool, validateEgressPolicy } from "../network/index.js";
import { ENVD_PORT } from "../protocol/index.js";
import { type Logger, toWarrenError, WarrenError } from "../shared/index.js";
import type { MachineShape, VmmDriver } from "../vmm/index.js";
import { ensureBaseTemplate } from "./base-template.js";
import { Capacity, type CapacityLimits } from "./capacity.js";
import { initEnvd } from "./envd-client.js";
import { newId } from "./ids.js";
import { ensureLayout, type StateLayout } from "./layout.js";
import { byStart, matchesFilter } from "./list-filter.js";
import {
  configOf,
  type LiveSandbox,
  newRow,
  type SandboxConfig,
  sandboxInfo,
} from "./live-sandbox.js";
import { egressPolicyOf } from "./network-config.js";
import { recoverLeftovers } from "./recovery.js";
import { SandboxVms } from "./sandbox-vms.js";
import { Semaphore } from "./semaphore.js";
import { SerialLock } from "./serial-lock.js";
import { SnapshotStore } from "./snapshot-store.js";
import { capturedToken, listSnapshotTemplates, snapshotInfo } from "./snapshot-templates.js";
import { sampleMetrics, sandboxLogs } from "./telemetry.js";
import type {
  CreateSandboxInput,
  ForkInput,
  ForkResult,
  ListFilter,
  NetworkUpdate,
  RouteResult,
  SandboxInfo,
  SandboxLogEntry,
  SandboxMetric,
  SandboxRouter,
  SandboxService,
  ServerStatus,
  SnapshotInfo,
} from "./types.js";
import { WarmPool, type WarmVm } from "./warm-pool.js";

export interface OrchestratorOptions {
  readonly catalog: Catalog;
  readonly driver: VmmDriver;
  readonly slots: SlotPool;
  readonly images: GuestArtifacts;
  readonly layout: StateLayout;
  readonly limits: CapacityLimits;
  readonly templateShape: MachineShape;
  /** Most children one fork call may ask for. */
  readonly maxForkCount: number;
  /** Disk layers above a template before a snapshot is flattened (SnapshotStore). */
  readonly flattenDepth: number;
  /** VMs brought up (restore and /init) at once; more creates, resumes and forks queue. */
  readonly maxConcurrentStarts: number;
  /** Warmed VMMs kept for the base template (0: none). */
  readonly poolSize: number;
  /** Below this much available host memory, pooled VMMs are given up. */
  readonly poolMinAvailableMiB: number;
  readonly defaultTimeoutMs: number;
  readonly accelerator: { readonly accel: "kvm" | "tcg"; readonly reason: string };
  readonly logger: Logger;
  /** How long a start or resume waits for envd to answer /init. */
  readonly envdDeadlineMs?: number;
}

const MAX_TIMER_MS = 2_147_483_647;

/**
 * The sandbox lifecycle: creating → running ⇄ (pausing → paused → resuming) → killing → gone.
 * One operation at a time per sandbox (SerialLock); kill aborts a create or resume in flight.
 * Every state change is written to the catalog before the caller hears of it.
 */
export class Orchestrator implements SandboxService, SandboxRouter {
  readonly #o: OrchestratorOptions;
  readonly #log: Logger;
  readonly #capacity: Capacity;
  readonly #lock = new SerialLock();
  readonly #sandboxes = new Map<string, LiveSandbox>();
  readonly #events = new EventEmitter();
  readonly #pool: WarmPool;
  readonly #vms: SandboxVms;
  readonly #snapshots: SnapshotStore;
  readonly #starts: Semaphore;
  #status: ServerStatus;
  #closing = false;

  constructor(options: OrchestratorOptions) {
    this.#o = options;
    this.#log = options.logger;
    this.#capacity = new Capacity(options.limits);
    this.#vms = new SandboxVms(options);
    this.#snapshots = new SnapshotStore({
      catalog: options.catalog,
      driver: options.driver,
      layout: options.layout,
      imagesFingerprint: options.images.fingerprint,
      flattenDepth: options.flattenDepth,
      logger: options.logger,
    });
    this.#starts = new Semaphore(options.maxConcurrentStarts);
    this.#pool = new WarmPool({
      driver: options.driver,
      slots: options.slots,
      images: options.images,
      layout: options.layout,
      capacity: this.#capacity,
      logger: options.logger,
      size: options.poolSize,
      minAvailableMiB: options.poolMinAvailableMiB,
    });
    this.#status = {
      phase: "starting",
      accelerator: options.accelerator.accel,
      acceleratorReason: options.accelerator.reason,
    };
  }

  /** Cleans what an earlier run left, loads paused sandboxes, makes sure `base` exists. */
  async start(): Promise<void> {
    try {
      const { catalog, layout } = this.#o;
      await ensureLayout(layout);
      await recoverLeftovers({ catalog, layout, snapshots: this.#snapshots, logger: this.#log });
      await this.#o.slots.cleanupStale();
      await this.#o.slots.start();
      for (const row of await catalog.listSandboxes(["paused"])) {
        this.#sandboxes.set(row.id, { row, metrics: [] });
      }
      const base = await ensureBaseTemplate({
        catalog,
        driver: this.#o.driver,
        slots: this.#o.slots,
        images: this.#o.images,
        layout,
        shape: this.#o.templateShape,
        logger: this.#log,
      });
      const baseSnapshot = await catalog.getSnapshot(base.snapshotId);
      if (baseSnapshot) this.#pool.keepWarm(base.snapshotId, baseSnapshot.dir, base);
      this.#status = { ...this.#status, phase: "ready" };
      this.#log.info({ paused: this.#sandboxes.size }, "orchestrator.ready");
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      this.#status = { ...this.#status, phase: "failed", message };
      throw err;
    }
  }

  /**
   * Stops serving: running sandboxes are paused so that nothing in them is lost (they
   * resume on the next connect), then slots and catalog are closed.
   */
  async close(): Promise<void> {
    this.#closing = true;
    for (const live of this.#sandboxes.values()) clearTimeout(live.ttlTimer);
    const running = [...this.#sandboxes.values()].filter((l) => l.row.state === "running");
    for (const live of running) {
      await this.pause(live.row.id).catch(async (err) => {
        this.#log.warn({ sandboxId: live.row.id, err }, "sandbox.pause_on_shutdown_failed");
        await this.kill(live.row.id).catch(() => {});
      });
    }
    await this.#pool.close();
    await this.#snapshots.close();
    await this.#o.slots.close();
    await this.#o.catalog.close();
  }

  status(): ServerStatus {
    return { ...this.#status, pooledVmms: this.#pool.stats.ready };
  }

  // ---- SandboxService -------------------------------------------------------------------

  async create(input: CreateSandboxInput): Promise<SandboxInfo> {
    this.#ensureReady();
    const template = await this.#template(input.templateId);
    // Checked before anything is reserved: a bad list is the caller's 400.
    validateEgressPolicy(egressPolicyOf(input.network, input.allowInternetAccess));
    const config: SandboxConfig = {
      network: input.network,
      allowInternetAccess: input.allowInternetAccess,
      lifecycle: input.lifecycle,
      secure: input.secure,
    };
    return this.#launch(
      newRow({
        templateId: template.id,
        alias: template.aliases[0],
        shape: template,
        metadata: input.metadata,
        envVars: input.envVars,
        config,
        timeoutMs: input.timeoutMs,
        snapshotId: template.snapshotId,
      }),
      await capturedToken(this.#o.catalog, template.snapshotId),
    );
  }

  /**
   * Admits a new sandbox (capacity, catalog row) and starts it from its row's snapshot.
   * `presentToken`: the token the captured envd still holds (a fork child's source's).
   */
  async #launch(fresh: SandboxRow, presentToken?: string): Promise<SandboxInfo> {
    const snapshotId = fresh.snapshotId as string;
    const warm = this.#pool.take(snapshotId);
    // A warmed VMM brings its id (its runtime dir is named after it) and its capacity share.
    const row = warm ? { ...fresh, id: warm.id } : fresh;
    const releaseCapacity = warm ? warm.releaseCapacity : this.#capacity.reserve(row);
    const live: LiveSandbox = { row, releaseCapacity, abort: new AbortController(), metrics: [] };
    try {
      await this.#o.catalog.insertSandbox(row);
    } catch (err) {
      if (warm) await warm.prepared.discard().catch(() => {});
      if (warm) await this.#o.slots.release(warm.slot).catch(() => {});
      releaseCapacity();
      throw err;
    }
    this.#sandboxes.set(row.id, live);
    this.#log.info(
      { sandboxId: row.id, snapshotId, pooled: warm !== undefined },
      "sandbox.creating",
    );
    const started = performance.now();
    await this.#lock.run(row.id, async () => {
      try {
        await this.#startVm(live, snapshotId, presentToken, warm);
        await this.#update(live, { state: "running" });
        this.#armTtl(live);
      } catch (err) {
        await this.#teardown(live, live.abort?.signal.aborted ? "killed" : "failed");
        throw live.abort?.signal.aborted
          ? new WarrenError("conflict", `sandbox ${row.id} was killed while it was being created`)
          : err;
      } finally {
        live.abort = undefined;
      }
    });
    const durationMs = Math.round(performance.now() - started);
    this.#log.info({ sandboxId: row.id, snapshotId, durationMs }, "sandbox.created");
    await this.#event(row.id, "sandbox.created", { durationMs, snapshotId });
    return sandboxInfo(live.row);
  }

  get(sandboxId: string): SandboxInfo {
    return sandboxInfo(this.#live(sandboxId).row);
  }

  list(filter: ListFilter): SandboxInfo[] {
    return [...this.#sandboxes.values()]
      .map((live) => live.row)
      .filter((row) => matchesFilter(row, filter))
      .sort(byStart)
      .map(sandboxInfo);
  }

  async kill(sandboxId: string): Promise<void> {
    const live = this.#live(sandboxId);
    live.abort?.abort();
    await this.#lock.run(sandboxId, async () => {
      if (!this.#sandboxes.has(sandboxId)) return; // a create that the abort already undid
      await this.#teardown(live, "killed");
    });
  }

  async pause(sandboxId: string): Promise<void> {
    const live = this.#live(sandboxId);
    await this.#lock.run(sandboxId, async () => {
      this.#mustExist(sandboxId);
      if (live.row.state === "paused") {
        throw new WarrenError("conflict", `sandbox ${sandboxId} is already paused`);
      }
      await this.#pauseNow(live);
    });
  }

  async connect(
    sandboxId: string,
    timeoutMs: number | undefined,
  ): Promise<{ sandbox: SandboxInfo; resumed: boolean }> {
    this.#ensureReady();
    const live = this.#live(sandboxId);
    const ttl = timeoutMs ?? this.#o.defaultTimeoutMs;
    return this.#lock.run(sandboxId, async () => {
      this.#mustExist(sandboxId);
      if (live.row.state === "paused") {
        await this.#resumeNow(live, ttl);
        return { sandbox: sandboxInfo(live.row), resumed: true };
      }
      const wanted = Date.now() + ttl;
      if (wanted > Date.parse(live.row.endAt)) {
        await this.#update(live, { endAt: new Date(wanted).toISOString() });
        this.#armTtl(live);
      }
      return { sandbox: sandboxInfo(live.row), resumed: false };
    });
  }

  async resume(
    sandboxId: string,
    timeoutMs: number | undefined,
    autoPause?: boolean,
  ): Promise<SandboxInfo> {
    this.#ensureReady();
    const live = this.#live(sandboxId);
    return this.#lock.run(sandboxId, async () => {
      this.#mustExist(sandboxId);
      if (live.row.state !== "paused") {
        throw new WarrenError("conflict", `sandbox ${sandboxId} is already running`);
      }
      if (autoPause !== undefined) {
        const config = configOf(live.row);
        const lifecycle = { ...config.lifecycle, onTimeout: autoPause ? "pause" : "kill" } as const;
        await this.#update(live, { config: { ...config, lifecycle } });
      }
      await this.#resumeNow(live, timeoutMs ?? this.#o.defaultTimeoutMs);
      return sandboxInfo(live.row);
    });
  }

  async setTimeout(sandboxId: string, timeoutMs: number): Promise<void> {
    const live = this.#live(sandboxId);
    await this.#lock.run(sandboxId, async () => {
      this.#mustExist(sandboxId);
      if (live.row.state === "paused") {
        throw new WarrenError("conflict", `sandbox ${sandboxId} is paused: resume it first`);
      }
      await this.#update(live, { endAt: new Date(Date.now() + timeoutMs).toISOString() });
      this.#armTtl(live);
    });
  }

  async refresh(sandboxId: string, durationMs: number): Promise<void> {
    const live = this.#live(sandboxId);
    await this.#lock.run(sandboxId, async () => {
      this.#mustExist(sandboxId);
      if (live.row.state === "paused") {
        throw new WarrenError("conflict", `sandbox ${sandboxId} is paused: resume it first`);
      }
      const wanted = Date.now() + durationMs;
      if (wanted <= Date.parse(live.row.endAt)) return;
      await this.#update(live, { endAt: new Date(wanted).toISOString() });
      this.#armTtl(live);
    });
  }

  async metrics(sandboxId: string, window: { start?: Date; end?: Date }): Promise<SandboxMetric[]> {
    const live = this.#live(sandboxId);
    return sampleMetrics(live, window).catch((err: unknown) => {
      this.#log.warn({ sandboxId, err }, "sandbox.metrics_failed");
      throw new WarrenError("unavailable", `metrics of sandbox ${sandboxId} could not be read`);
    });
  }

  logs(sandboxId: string, options: { start?: Date; limit?: number }): Promise<SandboxLogEntry[]> {
    return sandboxLogs(this.#o.catalog, this.#live(sandboxId), options);
  }

  async updateNetwork(sandboxId: string, update: NetworkUpdate): Promise<void> {
    const live = this.#live(sandboxId);
    await this.#lock.run(sandboxId, async () => {
      this.#mustExist(sandboxId);
      const config = configOf(live.row);
      const next: SandboxConfig = {
        ...config,
        network: {
          ...config.network,
          allowOut: update.allowOut ?? config.network.allowOut,
          denyOut: update.denyOut ?? config.network.denyOut,
        },
        allowInternetAccess: update.allowInternetAccess ?? config.allowInternetAccess,
      };
      const policy = validateEgressPolicy(egressPolicyOf(next.network, next.allowInternetAccess));
      if (live.slot) await live.slot.setPolicy(policy);
      await this.#update(live, { config: next as unknown as Record<string, unknown> });
      await this.#event(sandboxId, "sandbox.network_updated", { ...update });
    });
  }

  // ---- fork and snapshots ------------------------------------------------------------------

  async fork(sandboxId: string, input: ForkInput): Promise<ForkResult[]> {
    this.#ensureReady();
    const source = this.#live(sandboxId);
    if (!Number.isInteger(input.count) || input.count < 1 || input.count > this.#o.maxForkCount) {
      throw new WarrenError(
        "invalid_argument",
        `count must be an integer from 1 to ${this.#o.maxForkCount}, got ${input.count}`,
      );
    }
    const snapshotId = await this.#capture(source, "fork");
    const row = source.row;
    const config = configOf(row);
    const started = performance.now();
    const results = await Promise.all(
      Array.from({ length: input.count }, async (): Promise<ForkResult> => {
        try {
          const child = newRow({
            templateId: row.templateId,
            alias: row.alias,
            shape: row,
            metadata: { ...row.metadata, ...input.metadata },
            envVars: row.envVars,
            config,
            timeoutMs: input.timeoutMs ?? this.#o.defaultTimeoutMs,
            snapshotId,
          });
          return { sandbox: await this.#launch(child, row.envdAccessToken) };
        } catch (err) {
          const error = toWarrenError(err);
          return { error: { code: error.status, message: error.message } };
        }
      }),
    );
    const startedCount = results.filter((r) => "sandbox" in r).length;
    const durationMs = Math.round(performance.now() - started);
    this.#log.info(
      { sandboxId, snapshotId, count: input.count, started: startedCount, durationMs },
      "sandbox.forked",
    );
    await this.#event(sandboxId, "sandbox.forked", {
      snapshotId,
      count: input.count,
      started: startedCount,
    });
    // A fork whose every child failed leaves a capture nobody uses.
    await this.#snapshots.release(snapshotId);
    return results;
  }

  async createSnapshot(sandboxId: string, input: { name?: string }): Promise<SnapshotInfo> {
    this.#ensureReady();
    const source = this.#live(sandboxId);
    if (input.name !== undefined) {
      if (!/^[a-z0-9][a-z0-9._-]{0,62}$/.test(input.name)) {
        throw new WarrenError(
          "invalid_argument",
          "name must be 1-63 characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit",
        );
      }
      if (await this.#o.catalog.getTemplate(input.name)) {
        throw new WarrenError("already_exists", `a template named '${input.name}' already exists`);
      }
    }
    const snapshotId = await this.#capture(source, "named");
    const template: TemplateRow = {
      id: newId(),
      aliases: input.name ? [input.name] : [],
      kind: "snapshot",
      snapshotId,
      vcpus: source.row.vcpus,
      memoryMiB: source.row.memoryMiB,
      diskSizeMiB: source.row.diskSizeMiB,
      createdAt: new Date().toISOString(),
    };
    await this.#o.catalog.putTemplate(template);
    await this.#event(sandboxId, "sandbox.snapshotted", { template: template.id, snapshotId });
    return snapshotInfo(template, sandboxId);
  }

  listSnapshots(filter: { sandboxId?: string; name?: string }): Promise<SnapshotInfo[]> {
    return listSnapshotTemplates(this.#o.catalog, filter);
  }

  async deleteTemplate(templateId: string): Promise<void> {
    const template = await this.#template(templateId);
    if (template.kind === "base") {
      throw new WarrenError("invalid_argument", `'${templateId}' is the built-in base template`);
    }
    // Sandboxes made from it (and their forks, which inherit the template) block deletion. Its
    // data may stay a while longer: the source sandbox's disk may stand on it (refcounted).
    const users = [...this.#sandboxes.values()]
      .filter((live) => live.row.templateId === template.id)
      .map((live) => live.row.id);
    if (users.length > 0) {
      throw new WarrenError(
        "conflict",
        `snapshot ${templateId} is still used by sandbox${users.length > 1 ? "es" : ""} ${users.join(", ")}: kill ${users.length > 1 ? "them" : "it"} first`,
      );
    }
    await this.#o.catalog.deleteTemplate(template.id);
    await this.#snapshots.release(template.snapshotId);
  }

  /**
   * The sandbox's state as a snapshot. Running: stopped only while its state is written,
   * then it continues on a fresh overlay stacked on the capture. Paused: its pause snapshot.
   */
  async #capture(live: LiveSandbox, kind: "fork" | "named"): Promise<string> {
    return this.#lock.run(live.row.id, async () => {
      this.#mustExist(live.row.id);
      if (live.row.state === "paused" && live.row.snapshotId) return live.row.snapshotId;
      const vm = live.vm;
      if (live.row.state !== "running" || !vm) {
        throw new WarrenError("conflict", `sandbox ${live.row.id} is ${live.row.state}`);
      }
      const { id: snapshotId, timing } = await this.#snapshots.capture(vm, {
        sandboxId: live.row.id,
        parentId: live.row.snapshotId,
        kind,
        resume: true,
      });
      // Its disk now stands on the capture.
      await this.#update(live, { snapshotId });
      this.#log.info({ sandboxId: live.row.id, snapshotId, kind, ...timing }, "sandbox.captured");
      return snapshotId;
    });
  }

  // ---- SandboxRouter ------------------------------------------------------------------------

  async route(sandboxId: string, port: number): Promise<RouteResult> {
    const live = this.#sandboxes.get(sandboxId);
    if (!live) return { kind: "not_found" };
    if (live.row.state === "paused" || live.row.state === "pausing") {
      if (!configOf(live.row).lifecycle.autoResume || this.#status.phase !== "ready") {
        return { kind: "not_found" };
      }
      try {
        await this.connect(sandboxId, undefined);
      } catch (err) {
        this.#log.warn({ sandboxId, err }, "sandbox.auto_resume_failed");
        return { kind: "not_found" };
      }
    } else if (live.row.state === "creating" || live.row.state === "resuming") {
      // Wait for the transition in flight, then look again.
      await this.#lock.run(sandboxId, async () => {});
    }
    if (live.row.state === "killing" || live.row.state === "pausing") {
      return { kind: "conflict", message: `sandbox ${sandboxId} is ${live.row.state}` };
    }
    if (live.row.state !== "running" || !live.slot || !this.#sandboxes.has(sandboxId)) {
      return { kind: "not_found" };
    }
    const config = configOf(live.row);
    return {
      kind: "ok",
      route: {
        sandboxId,
        host: live.slot.hostAddress,
        port,
        trafficAccessToken: live.row.trafficAccessToken,
        allowPublicTraffic: config.network.allowPublicTraffic || port === ENVD_PORT,
        maskRequestHost: config.network.maskRequestHost,
      },
    };
  }

  onSandboxStopped(listener: (sandboxId: string) => void): () => void {
    this.#events.on("stopped", listener);
    return () => this.#events.off("stopped", listener);
  }

  // ---- internals ----------------------------------------------------------------------------

  #ensureReady(): void {
    if (this.#closing) throw new WarrenError("unavailable", "the server is shutting down");
    if (this.#status.phase === "starting") {
      throw new WarrenError(
        "unavailable",
        "the server is starting up (building the base template)",
      );
    }
    if (this.#status.phase === "failed") {
      throw new WarrenError("unavailable", `the server failed to start: ${this.#status.message}`);
    }
  }

  #live(sandboxId: string): LiveSandbox {
    const live = this.#sandboxes.get(sandboxId);
    if (!live) throw new WarrenError("not_found", `sandbox ${sandboxId} not found`);
    return live;
  }

  /** Inside the lock: the sandbox may have been killed while the operation waited. */
  #mustExist(sandboxId: string): void {
    if (!this.#sandboxes.has(sandboxId)) {
      throw new WarrenError("not_found", `sandbox ${sandboxId} not found`);
    }
  }

  /** By id or name; a `:tag` suffix (E2B's snapshot ids end in `:default`) is ignored. */
  async #template(idOrAlias: string): Promise<TemplateRow> {
    const template = await this.#o.catalog.getTemplate(idOrAlias.replace(/:[^/:]*$/, ""));
    if (!template) throw new WarrenError("not_found", `template '${idOrAlias}' not found`);
    return template;
  }

  async #update(live: LiveSandbox, patch: SandboxPatch): Promise<void> {
    live.row = (await this.#o.catalog.updateSandbox(live.row.id, patch)) ?? {
      ...live.row,
      ...patch,
    };
  }

  async #event(sandboxId: string, kind: string, detail?: Record<string, unknown>): Promise<void> {
    await this.#o.catalog
      .recordEvent({ at: new Date().toISOString(), sandboxId, kind, detail })
      .catch((err: unknown) => this.#log.warn({ err, sandboxId, kind }, "catalog.event_failed"));
  }

  /** Slot, VM from the snapshot, /init: the sandbox answers once this returns. */
  #startVm(
    live: LiveSandbox,
    snapshotId: string,
    presentToken?: string,
    warm?: WarmVm,
  ): Promise<void> {
    // A pooled VMM only continues: it does not queue behind restores.
    if (warm) return this.#bringUp(live, snapshotId, presentToken, warm);
    return this.#starts.use(() => this.#bringUp(live, snapshotId, presentToken));
  }

  async #bringUp(
    live: LiveSandbox,
    snapshotId: string,
    presentToken?: string,
    warm?: WarmVm,
  ): Promise<void> {
    const config = configOf(live.row);
    const policy = validateEgressPolicy(egressPolicyOf(config.network, config.allowInternetAccess));
    const signal = live.abort?.signal;
    const started = performance.now();
    if (warm) await this.#vms.startWarm(live, warm, policy, signal);
    else await this.#vms.restore(live, snapshotId, policy, signal);
    const vmMs = Math.round(performance.now() - started);
    this.#watchExit(live);
    signal?.throwIfAborted();
    const host = (live.slot as Slot).hostAddress; // set by startWarm or restore
    await initEnvd(
      host,
      { envVars: { ...live.row.envVars }, accessToken: live.row.envdAccessToken ?? "" },
      {
        token: presentToken ?? live.row.envdAccessToken,
        deadlineMs: this.#o.envdDeadlineMs ?? 30_000,
        signal,
      },
    );
    signal?.throwIfAborted();
    const initMs = Math.round(performance.now() - started) - vmMs;
    this.#log.info(
      { sandboxId: live.row.id, pooled: warm !== undefined, vmMs, initMs },
      "sandbox.vm_up",
    );
  }

  /** A VMM that dies while its sandbox runs: the sandbox is lost, and says so. */
  #watchExit(live: LiveSandbox): void {
    const vm = live.vm;
    void vm?.exited.then(async (exit) => {
      if (exit.expected || live.vm !== vm) return;
      this.#log.error({ sandboxId: live.row.id, exit }, "sandbox.vmm_died");
      await this.#lock
        .run(live.row.id, async () => {
          if (live.vm !== vm || !this.#sandboxes.has(live.row.id)) return;
          live.vm = undefined;
          await this.#teardown(live, `lost: the VMM exited (${exit.reason})`);
        })
        .catch((err: unknown) => this.#log.error({ err }, "sandbox.cleanup_failed"));
    });
  }

  #armTtl(live: LiveSandbox): void {
    clearTimeout(live.ttlTimer);
    if (this.#closing) return;
    const delay = Math.max(0, Math.min(Date.parse(live.row.endAt) - Date.now(), MAX_TIMER_MS));
    live.ttlTimer = setTimeout(() => void this.#expire(live), delay);
    live.ttlTimer.unref();
  }

  async #expire(live: LiveSandbox): Promise<void> {
    const id = live.row.id;
    await this.#lock
      .run(id, async () => {
        if (!this.#sandboxes.has(id) || live.row.state !== "running") return;
        if (Date.parse(live.row.endAt) > Date.now() + 50) return this.#armTtl(live);
        if (configOf(live.row).lifecycle.onTimeout === "pause") {
          await this.#pauseNow(live);
        } else {
          await this.#teardown(live, "timeout");
        }
      })
      .catch((err: unknown) => this.#log.error({ sandboxId: id, err }, "sandbox.expiry_failed"));
  }

  /** Inside the lock, state running: capture to a new snapshot and let the VMM go. */
  async #pauseNow(live: LiveSandbox): Promise<void> {
    const vm = live.vm;
    if (!vm) throw new WarrenError("conflict", `sandbox ${live.row.id} is not running`);
    clearTimeout(live.ttlTimer);
    await this.#update(live, { state: "pausing" });
    let captured: Awaited<ReturnType<SnapshotStore["capture"]>>;
    try {
      captured = await this.#snapshots.capture(vm, {
        sandboxId: live.row.id,
        parentId: live.row.snapshotId,
        kind: "pause",
        resume: false,
      });
    } catch (err) {
      if (vm.pid && (await processAlive(vm.pid))) {
        await this.#update(live, { state: "running" });
        this.#armTtl(live);
        throw err;
      }
      await this.#teardown(live, "lost: pause failed");
      throw err;
    }
    const { id: snapshotId, timing } = captured;
    live.vm = undefined;
    this.#events.emit("stopped", live.row.id);
    await this.#update(live, { state: "paused", snapshotId });
    await this.#vms.release(live);
    this.#log.info({ sandboxId: live.row.id, ...timing }, "sandbox.paused");
    await this.#event(live.row.id, "sandbox.paused", { ...timing });
  }

  /** Inside the lock, state paused: restore from its snapshot and /init again. */
  async #resumeNow(live: LiveSandbox, timeoutMs: number): Promise<void> {
    const snapshotId = live.row.snapshotId;
    if (!snapshotId)
      throw new WarrenError("internal", `paused sandbox ${live.row.id} has no snapshot`);
    live.releaseCapacity = this.#capacity.reserve({
      vcpus: live.row.vcpus,
      memoryMiB: live.row.memoryMiB,
    });
    live.abort = new AbortController();
    const started = performance.now();
    await this.#update(live, { state: "resuming" });
    try {
      await this.#startVm(live, snapshotId);
    } catch (err) {
      const killed = live.abort.signal.aborted;
      live.abort = undefined;
      await this.#vms.release(live);
      if (killed) {
        await this.#teardown(live, "killed");
        throw new WarrenError(
          "conflict",
          `sandbox ${live.row.id} was killed while it was resuming`,
        );
      }
      await this.#update(live, { state: "paused" });
      throw err;
    }
    live.abort = undefined;
    await this.#update(live, {
      state: "running",
      endAt: new Date(Date.now() + timeoutMs).toISOString(),
    });
    this.#armTtl(live);
    const durationMs = Math.round(performance.now() - started);
    this.#log.info({ sandboxId: live.row.id, durationMs }, "sandbox.resumed");
    await this.#event(live.row.id, "sandbox.resumed", { durationMs });
  }

  /**
   * The end of a sandbox: everything it holds is released, and the snapshots it stood on are
   * deleted unless forks, templates or other sandboxes still use them.
   */
  async #teardown(live: LiveSandbox, reason: string): Promise<void> {
    const id = live.row.id;
    const standsOn = live.row.snapshotId;
    clearTimeout(live.ttlTimer);
    this.#events.emit("stopped", id);
    await this.#update(live, { state: "killing" }).catch(() => {});
    await this.#vms.release(live);
    await this.#update(live, { state: "killed", endedReason: reason, snapshotId: undefined });
    await this.#snapshots.release(standsOn);
    this.#sandboxes.delete(id);
    this.#log.info({ sandboxId: id, reason }, "sandbox.killed");
    await this.#event(id, "sandbox.killed", { reason });
  }
}

async function processAlive(pid: number): Promise<boolean> {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
