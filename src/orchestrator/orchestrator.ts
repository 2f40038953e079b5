import type { SnapshotFileRecord, TemplateRow } from "../catalog/index.js";
import { validateEgressPolicy } from "../network/index.js";
import { type Logger, WarrenError } from "../shared/index.js";
import type { DiskChains, MachineShape } from "../vmm/index.js";
import { assembleParts, type OrchestratorParts } from "./assembly.js";
import type { CapacityLimits } from "./capacity.js";
import type { StatDisk } from "./disk-space.js";
import { ensureLayout } from "./layout.js";
import type { EventListener, EventSource } from "./lifecycle-events.js";
import { byStart, matchesFilter } from "./list-filter.js";
import {
  configOf,
  type LiveSandbox,
  newRow,
  type SandboxConfig,
  sandboxInfo,
} from "./live-sandbox.js";
import { egressPolicyOf, withNetworkUpdate } from "./network-config.js";
import type { NodeDrivers } from "./node-drivers.js";
import { assertReady } from "./readiness.js";
import { reattachRunning } from "./reattach.js";
import { recoverLeftovers } from "./recovery.js";
import { routeSandbox } from "./routing.js";
import { requireState } from "./sandbox-table.js";
import type { VolumeServer } from "./sandbox-vms.js";
import { templateStart } from "./snapshot-templates.js";
import type { SharedSnapshots } from "./snapshots.js";
import type { TeamLimitsLookup } from "./team-quotas.js";
import { metricsWithin, sandboxLogs, takeMetricsSample } from "./telemetry.js";
import { findTemplate } from "./templates.js";
import type {
  BootTemplateInput,
  ClusterNodeService,
  CreateSandboxInput,
  ForkInput,
  ForkResult,
  ListFilter,
  NetworkUpdate,
  NodeLoad,
  NodeStats,
  PauseOptions,
  ResumeOptions,
  RouteResult,
  SandboxInfo,
  SandboxLineage,
  SandboxLogEntry,
  SandboxMetric,
  SandboxRouter,
  SandboxService,
  SandboxSpan,
  ServerStatus,
  SnapshotInfo,
  SpillingForkInput,
  SpillingForkResult,
  TemplateHost,
  WakeCheck,
} from "./types.js";
import { withTemplateVolumes } from "./volume-mounts.js";
import type { PoolSettings } from "./warm-pool.js";

export interface OrchestratorOptions extends NodeDrivers {
  /** Where snapshot disks are flattened (the driver's disks: QemuDriverOptions.disks). */
  readonly disks: DiskChains;
  readonly limits: CapacityLimits;
  readonly templateShape: MachineShape;
  /** Captures the code-interpreter-v1 template after start, when setup built its rootfs. */
  readonly codeInterpreter?: boolean;
  /** Most children one fork call may ask for. */
  readonly maxForkCount: number;
  /** Disk layers above a template before a snapshot is flattened (Snapshots). */
  readonly flattenDepth: number;
  /** VMs brought up (restore and /init) at once; more creates, resumes and forks queue. */
  readonly maxConcurrentStarts: number;
  /** Warm pools: per template, sized from demand, bounded by memory (WarmPool). */
  readonly pool: PoolSettings;
  /** Paused sandboxes' VMMs kept stopped for a quick resume (KeptVmms); unset: none kept. */
  readonly keptVmms?: { readonly keepMs: number; readonly maxKept: number };
  readonly defaultTimeoutMs: number;
  readonly accelerator: { readonly accel: "kvm" | "tcg"; readonly reason: string };
  readonly logger: Logger;
  /** How long a start or resume waits for envd to answer /init. Default 30 s. */
  readonly envdDeadlineMs?: number;
  /**
   * How long a start keeps its start permit (maxConcurrentStarts) while its guest has not
   * answered /init; then the next start may begin. Default 10 s (START_PERMIT_LEASE_MS).
   */
  readonly startPermitLeaseMs?: number;
  /** How long the base template's guest settles after boot before its capture. Default 2 s. */
  readonly templateSettleMs?: number;
  /** The cluster's shared snapshot store: paused sandboxes may then resume on other nodes. */
  readonly shared?: SharedSnapshots;
  /** Background metrics sampling of running sandboxes (MetricsSampler); 0 or unset: off. */
  readonly metricsIntervalMs?: number;
  /** Each team's limits (the team catalog); unset: no team quotas. */
  readonly teamLimits?: TeamLimitsLookup;
  /** statfs of the data dir, for free-disk admission (tests pass their own). */
  readonly statDisk?: StatDisk;
  /** Serves volumes to sandboxes that mount them; unset: such creates are refused. */
  readonly volumes?: VolumeServer;
  /** The node's egress CA (PEM), which every guest trusts (network.rules); unset: none. */
  readonly guestCaCertificate?: string;
  /**
   * What `close()` does with running sandboxes, asked at the close (WARREN_ON_STOP, or the
   * signal that stops the server): pause them (default), or detach them, left running in
   * the keeper for the next server to re-adopt.
   */
  readonly onStop?: () => "pause" | "detach";
}

/**
 * What the API and the proxy talk to: a facade over the parts that run sandboxes. The state
 * machine is `Lifecycle` (TTL timers in `TtlTimers`), fork and persistent snapshots are
 * `Forks`, proxy routing is `routeSandbox`, readiness is `assertReady`; `SandboxTable` holds
 * the sandboxes and the per-sandbox lock every operation runs under.
 */
export class Orchestrator
  implements SandboxService, ClusterNodeService, SandboxRouter, TemplateHost, EventSource
{
  readonly #o: OrchestratorOptions;
  readonly #log: Logger;
  /** Its parts, wired once (assembly.ts); the methods below turn each call into theirs. */
  readonly #p: OrchestratorParts;
  #status: ServerStatus;
  #draining = false;

  constructor(options: OrchestratorOptions) {
    this.#o = options;
    this.#log = options.logger;
    this.#p = assembleParts(options, {
      ready: () => this.#status.phase === "ready",
      resume: (id) => this.connect(id, undefined),
    });
    this.#status = {
      phase: "starting",
      accelerator: options.accelerator.accel,
      acceleratorReason: options.accelerator.reason,
    };
  }

  /** Cleans what an earlier run left, loads paused sandboxes, makes sure `base` exists. */
  async start(): Promise<void> {
    const { catalog, driver, slots, layout } = this.#o;
    try {
      await ensureLayout(layout);
      // First: what runs on in the keeper is taken back before anything is cleaned.
      const reattached = await reattachRunning({
        catalog,
        driver,
        slots,
        vms: this.#p.vms,
        lifecycle: this.#p.lifecycle,
        snapshots: this.#p.snapshots,
        layout,
        events: this.#p.events,
        logger: this.#log,
      });
      await recoverLeftovers({
        catalog,
        driver,
        layout,
        snapshots: this.#p.snapshots,
        logger: this.#log,
        events: this.#p.events,
        reattached,
      });
      await slots.cleanupStale();
      await slots.start();
      for (const row of await catalog.listSandboxes(["paused"])) {
        this.#p.table.add({ row, metrics: [] });
      }
      const base = await this.#p.templates.ensureBase();
      const baseSnapshot = await catalog.getSnapshot(base.snapshotId);
      if (baseSnapshot) {
        const pooled = { snapshotId: base.snapshotId, dir: baseSnapshot.dir, shape: base };
        this.#p.pool.keepWarm(pooled, this.#o.pool.baseFloor);
      }
      this.#status = { ...this.#status, phase: "ready" };
      this.#p.templates.startCodeInterpreter();
      this.#p.sampler.start();
      this.#log.info(
        { paused: this.#p.table.values().length - reattached.size, reattached: reattached.size },
        "orchestrator.ready",
      );
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      this.#status = { ...this.#status, phase: "failed", message };
      throw err;
    }
  }

  /**
   * Stops serving: running sandboxes are paused so that nothing in them is lost (they
   * resume on the next connect), or with `onStop: "detach"` left running in the keeper (the
   * next server re-adopts them: their rows, slots and runtime directories stay as they
   * are); then slots and catalog are closed.
   */
  async close(): Promise<void> {
    this.#status = { ...this.#status, phase: "stopping" };
    this.#p.lifecycle.ttl.close();
    await this.#p.sampler.stop();
    // Pauses on the way out keep nothing: their VMMs would only be given up below.
    await this.#p.kept.close();
    const detach = this.#o.onStop?.() === "detach";
    for (const live of this.#p.table.values().filter((l) => l.row.state === "running")) {
      const id = live.row.id;
      if (detach) await this.#p.table.serial(id, async () => this.#detach(live));
      else
        await this.pause(id).catch(async (err: unknown) => {
          this.#log.warn({ sandboxId: id, err }, "sandbox.pause_on_shutdown_failed");
          await this.kill(id).catch(() => {});
        });
    }
    await this.#p.pool.close();
    await this.#p.snapshots.close();
    await this.#o.slots.close({ keepInUse: detach });
    await this.#o.catalog.close();
  }

  /** A running sandbox let go of at a stop: its VMM runs on in the keeper, its row as it is. */
  async #detach(live: LiveSandbox): Promise<void> {
    const { vm } = live;
    if (live.row.state !== "running" || !vm) return;
    live.guestCalls?.abort();
    vm.detach();
    live.vm = undefined;
    await this.#p.events.emit("sandbox.detached", { sandboxId: live.row.id });
  }

  /**
   * Resolves once the warm pools are still: no VMM being warmed or given up (a refill due
   * now runs first), no kept VMM being given up, no released slot or runtime directory still
   * being cleaned. What the node holds is then its sandboxes', the pooled VMMs' and the kept
   * ones' only.
   */
  async settled(): Promise<void> {
    await this.#p.pool.settled();
    await this.#p.kept.settled();
    await this.#p.vms.settled();
  }

  status(): ServerStatus {
    return { ...this.#status, pooledVmms: this.#p.pool.stats.ready };
  }

  /** Its lifecycle events (events.ts) as they are emitted: the node's metrics follow them. */
  onEvent(listener: EventListener): () => void {
    return this.#p.events.onEvent(listener);
  }

  // ---- sandboxes ----------------------------------------------------------------------------

  /** What this node holds, for a cluster's placement (NodeViews.load). */
  load(): Promise<NodeLoad> {
    return this.#p.views.load();
  }

  teamHistory(teamId: string): Promise<SandboxSpan[]> {
    return this.#p.views.teamHistory(teamId);
  }

  lineage(): Promise<SandboxLineage[]> {
    return this.#p.views.lineage();
  }

  stats(): NodeStats {
    return this.#p.views.stats();
  }

  async create(input: CreateSandboxInput): Promise<SandboxInfo> {
    assertReady(this.#status);
    const { catalog } = this.#o;
    // The code interpreter's first capture runs after start: a create for it waits for it.
    const template = await this.#p.templates.find(input.templateId, () =>
      findTemplate(catalog, input.templateId, { layers: input.internal, teamId: input.teamId }),
    );
    // Checked before anything is reserved: a bad list is the caller's 400.
    validateEgressPolicy(egressPolicyOf(input, input.teamId));
    const volumeMounts = withTemplateVolumes(template, input.volumeMounts ?? []);
    if (volumeMounts.length > 0 && !this.#o.volumes) {
      throw new WarrenError(
        "invalid_argument",
        "volumeMounts: volumes are not served on this node",
      );
    }
    const config: SandboxConfig = {
      network: input.network,
      allowInternetAccess: input.allowInternetAccess,
      lifecycle: input.lifecycle,
      secure: input.secure,
      ...(input.internal && { internal: true }),
      ...(volumeMounts.length > 0 && { volumeMounts }),
    };
    const row = newRow({
      teamId: input.teamId,
      templateId: template.id,
      alias: template.aliases[0],
      shape: template,
      metadata: input.metadata,
      envVars: input.envVars,
      config,
      timeoutMs: input.timeoutMs,
      snapshotId: template.snapshotId,
    });
    const start = await templateStart(catalog, template, (id) => this.#p.snapshots.localDir(id));
    // A build VM starts once from its layer: no demand to learn from, no pool to take from.
    return this.#p.lifecycle.launch(
      row,
      start.presentToken,
      input.internal ? undefined : start.pool,
    );
  }

  get(sandboxId: string): SandboxInfo {
    return sandboxInfo(this.#p.table.get(sandboxId).row);
  }

  list(filter: ListFilter): SandboxInfo[] {
    return this.#p.table
      .values()
      .map((live) => live.row)
      .filter((row) => matchesFilter(row, filter))
      .sort(byStart)
      .map(sandboxInfo);
  }

  async kill(sandboxId: string): Promise<void> {
    const live = this.#p.table.get(sandboxId);
    live.abort?.abort();
    await this.#p.table.serial(sandboxId, async () => {
      if (!this.#p.table.has(sandboxId)) return; // a create or resume the abort already undid
      await this.#p.lifecycle.teardown(live, "killed");
    });
  }

  /**
   * Brings this node back in line with the catalog after a cluster marked it down (it was
   * silent too long, and its running sandboxes were reported lost): a sandbox whose row is
   * now killed is torn down here too, and one no longer this node's (a paused sandbox another
   * node claimed) is forgotten without touching its row or its snapshot. Returns how many.
   */
  async reconcile(): Promise<number> {
    let changed = 0;
    for (const live of this.#p.table.values()) {
      const id = live.row.id;
      await this.#p.table.serial(id, async () => {
        if (!this.#p.table.has(id)) return;
        const row = await this.#o.catalog.getSandbox(id);
        if (row && row.state !== "killed") return;
        changed += 1;
        this.#p.events.emit("sandbox.reconciled", { sandboxId: id, state: row?.state ?? "moved" });
        if (row) await this.#p.lifecycle.teardown(live, row.endedReason ?? "lost");
        else {
          await this.#p.vms.release(live);
          this.#p.table.remove(id);
        }
      });
    }
    return changed;
  }

  /**
   * In a cluster, once per heartbeat: drops the paused sandboxes a gateway moved to another
   * node (ClusterCatalog.claimSandbox) and takes in those moved here. Returns how many moved.
   */
  async syncPaused(): Promise<number> {
    const held = await this.#o.catalog.listSandboxes(["paused"]);
    const heldIds = new Set(held.map((row) => row.id));
    let moved = 0;
    for (const row of held) if (await this.#adopt(row.id)) moved += 1;
    for (const live of this.#p.table.values()) {
      const id = live.row.id;
      if (live.row.state !== "paused" || heldIds.has(id)) continue;
      await this.#p.table.serial(id, async () => {
        if (!this.#p.table.has(id) || live.row.state !== "paused") return;
        if (await this.#o.catalog.getSandbox(id)) return;
        this.#p.table.remove(id);
        moved += 1;
        this.#p.events.emit("sandbox.moved_away", { sandboxId: id });
      });
    }
    return moved;
  }

  /** Whether the cluster drains this node (drain, undrain): reported with its load. */
  get draining(): boolean {
    return this.#draining;
  }

  /**
   * Drain: pauses every running sandbox and publishes every paused one's snapshot, so that
   * gateways resume them on other nodes (they place nothing new on a draining node).
   */
  async drain(): Promise<void> {
    this.#draining = true;
    for (const live of this.#p.table.values()) {
      if (live.row.state !== "running") continue;
      await this.pause(live.row.id).catch((err: unknown) =>
        this.#log.warn({ sandboxId: live.row.id, err }, "sandbox.drain_pause_failed"),
      );
    }
    for (const live of this.#p.table.values()) {
      const snapshotId = live.row.state === "paused" ? live.row.snapshotId : undefined;
      if (snapshotId) await this.#p.snapshots.publish(snapshotId).catch(() => {});
    }
  }

  async undrain(): Promise<void> {
    this.#draining = false;
  }

  /**
   * A paused sandbox a gateway moved here, taken in with its snapshot fetched, so that the
   * connect or resume that follows only restores it.
   */
  async adopt(sandboxId: string): Promise<void> {
    assertReady(this.#status);
    await this.#adopt(sandboxId);
    const { snapshotId } = this.#p.table.get(sandboxId).row;
    if (snapshotId) await this.#p.snapshots.localDir(snapshotId);
  }

  /**
   * A paused sandbox moved here joins the table, on its first call or the next sync; read
   * again under its lock (a kill may have just ended it).
   */
  async #adopt(sandboxId: string): Promise<boolean> {
    if (this.#p.table.has(sandboxId)) return false;
    return this.#p.table.serial(sandboxId, async () => {
      if (this.#p.table.has(sandboxId)) return false;
      const row = await this.#o.catalog.getSandbox(sandboxId);
      if (row?.state !== "paused") return false;
      this.#p.table.add({ row, metrics: [] });
      this.#p.events.emit("sandbox.moved_here", { sandboxId });
      return true;
    });
  }

  async pause(sandboxId: string, options: PauseOptions = {}): Promise<void> {
    return this.#p.table.locked(sandboxId, async (live) => {
      requireState(live, "running", `sandbox ${sandboxId} is already paused`);
      await this.#p.lifecycle.pause(live, options);
    });
  }

  async connect(
    sandboxId: string,
    timeoutMs: number | undefined,
    options: ResumeOptions = {},
  ): Promise<{ sandbox: SandboxInfo; resumed: boolean }> {
    assertReady(this.#status);
    const ttl = timeoutMs ?? this.#o.defaultTimeoutMs;
    await this.#adopt(sandboxId);
    return this.#p.table.locked(sandboxId, async (live) => {
      if (live.row.state === "paused") {
        await this.#p.lifecycle.resume(live, ttl, options);
        return { sandbox: sandboxInfo(live.row), resumed: true };
      }
      await this.#p.lifecycle.extendDeadline(live, ttl);
      return { sandbox: sandboxInfo(live.row), resumed: false };
    });
  }

  async resume(
    sandboxId: string,
    timeoutMs: number | undefined,
    autoPause?: boolean,
    options: ResumeOptions = {},
  ): Promise<SandboxInfo> {
    assertReady(this.#status);
    await this.#adopt(sandboxId);
    return this.#p.table.locked(sandboxId, async (live) => {
      requireState(live, "paused");
      if (autoPause !== undefined) {
        const config = configOf(live.row);
        const lifecycle = { ...config.lifecycle, onTimeout: autoPause ? "pause" : "kill" } as const;
        await this.#p.lifecycle.update(live, { config: { ...config, lifecycle } });
      }
      await this.#p.lifecycle.resume(live, timeoutMs ?? this.#o.defaultTimeoutMs, options);
      return sandboxInfo(live.row);
    });
  }

  async setTimeout(sandboxId: string, timeoutMs: number): Promise<void> {
    return this.#p.table.locked(sandboxId, async (live) => {
      requireState(live, "running");
      await this.#p.lifecycle.replaceDeadline(live, timeoutMs);
    });
  }

  async refresh(sandboxId: string, durationMs: number): Promise<void> {
    return this.#p.table.locked(sandboxId, async (live) => {
      requireState(live, "running");
      await this.#p.lifecycle.extendDeadline(live, durationMs);
    });
  }

  async metrics(sandboxId: string, window: { start?: Date; end?: Date }): Promise<SandboxMetric[]> {
    const live = this.#p.table.get(sandboxId);
    // A window reaching now gets a sample of now too (the background ones may be seconds old).
    if (!window.end || window.end.getTime() >= Date.now()) {
      await takeMetricsSample(this.#o.agent, live).catch((err: unknown) => {
        this.#log.warn({ sandboxId, err }, "sandbox.metrics_failed");
        throw new WarrenError(
          "guest_unavailable",
          `metrics of sandbox ${sandboxId} could not be read`,
        );
      });
    }
    return metricsWithin(live, window);
  }

  async logs(
    sandboxId: string,
    options: { start?: Date; limit?: number },
  ): Promise<SandboxLogEntry[]> {
    return sandboxLogs(this.#o.catalog, this.#o.agent, this.#p.table.get(sandboxId), options);
  }

  async updateNetwork(sandboxId: string, update: NetworkUpdate): Promise<void> {
    return this.#p.table.locked(sandboxId, async (live) => {
      const next = withNetworkUpdate(configOf(live.row), update);
      const policy = validateEgressPolicy(egressPolicyOf(next, live.row.teamId));
      if (live.slot) await live.slot.setPolicy(policy);
      await this.#p.lifecycle.update(live, { config: next as unknown as Record<string, unknown> });
      await this.#p.events.emit("sandbox.network_updated", { sandboxId, ...update });
    });
  }

  /** A snapshot directory's sealed files as recorded, once checksummed (restores check them). */
  sealedFiles(dir: string): Promise<readonly SnapshotFileRecord[] | undefined> {
    return this.#p.snapshots.sealedFiles(dir);
  }

  // ---- fork and snapshots -------------------------------------------------------------------

  async fork(sandboxId: string, input: ForkInput): Promise<ForkResult[]> {
    assertReady(this.#status);
    return this.#p.forks.fork(sandboxId, input);
  }

  async forkSpilling(sandboxId: string, input: SpillingForkInput): Promise<SpillingForkResult[]> {
    assertReady(this.#status);
    return this.#p.forks.forkSpilling(sandboxId, input);
  }

  async forkFromCapture(
    sandboxId: string,
    snapshotId: string,
    input: ForkInput,
  ): Promise<ForkResult[]> {
    assertReady(this.#status);
    return this.#p.forks.forkFromCapture(sandboxId, snapshotId, input);
  }

  async createSnapshot(sandboxId: string, input: { name?: string }): Promise<SnapshotInfo> {
    assertReady(this.#status);
    return this.#p.forks.createSnapshot(sandboxId, input);
  }

  async listSnapshots(filter: { sandboxId?: string; name?: string }): Promise<SnapshotInfo[]> {
    return this.#p.forks.listSnapshots(filter);
  }

  async deleteTemplate(templateId: string, teamId?: string): Promise<void> {
    return this.#p.forks.deleteTemplate(templateId, teamId);
  }

  // ---- TemplateHost -------------------------------------------------------------------------

  get templateShape(): MachineShape {
    return this.#o.templateShape;
  }

  get imagesFingerprint(): string {
    return this.#o.images.fingerprint;
  }

  get baseRootfs(): string {
    return this.#o.images.baseRootfs;
  }

  findTemplate(reference: string, teamId?: string): Promise<TemplateRow> {
    return findTemplate(this.#o.catalog, reference, { teamId });
  }

  guestEndpoint(sandboxId: string): { host: string; accessToken?: string } {
    const live = this.#p.table.get(sandboxId);
    if (live.row.state !== "running" || !live.slot) {
      throw new WarrenError("sandbox_busy", `sandbox ${sandboxId} is ${live.row.state}`);
    }
    return { host: live.slot.hostAddress, accessToken: live.row.envdAccessToken };
  }

  async captureTemplate(
    sandboxId: string,
    template: Pick<TemplateRow, "id" | "kind" | "aliases" | "config" | "teamId">,
  ): Promise<TemplateRow> {
    assertReady(this.#status);
    return this.#p.forks.captureTemplate(sandboxId, template);
  }

  async bootTemplate(input: BootTemplateInput): Promise<TemplateRow> {
    assertReady(this.#status);
    return this.#p.templates.boot(input);
  }

  async dropTemplate(template: TemplateRow): Promise<void> {
    return this.#p.forks.dropTemplate(template);
  }

  // ---- SandboxRouter ------------------------------------------------------------------------

  async route(sandboxId: string, port: number, mayWake: WakeCheck): Promise<RouteResult> {
    return routeSandbox(this.#p.routing, sandboxId, port, mayWake);
  }

  onSandboxStopped(listener: (sandboxId: string) => void): () => void {
    return this.#p.lifecycle.onStopped(listener);
  }

  sandboxWithToken(matches: (envdAccessToken: string) => boolean): string | undefined {
    for (const live of this.#p.table.values()) {
      const token = live.row.envdAccessToken;
      if (token !== undefined && matches(token)) return live.row.id;
    }
    return undefined;
  }
}
