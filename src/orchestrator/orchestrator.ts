import type {
  LifecycleEventQuery,
  LifecycleEventRow,
  SnapshotFileRecord,
  TemplateRow,
} from "../catalog/index.js";
import { validateEgressPolicy } from "../network/index.js";
import { type Logger, WarrenError } from "../shared/index.js";
import type { MachineShape } from "../vmm/index.js";
import { assembleParts, type OrchestratorParts } from "./assembly.js";
import { adoptPaused, reconcile, syncPaused } from "./cluster-sync.js";
import type { EventListener, EventSource } from "./lifecycle-events.js";
import type { OrchestratorOptions } from "./orchestrator-options.js";
import { assertReady } from "./readiness.js";
import { byStart, matchesFilter } from "./sandboxes/list-filter.js";
import {
  configOf,
  type LiveSandbox,
  newRow,
  type SandboxConfig,
  sandboxInfo,
} from "./sandboxes/live-sandbox.js";
import { egressPolicyOf, withNetworkUpdate } from "./sandboxes/network-config.js";
import { routeSandbox } from "./sandboxes/routing.js";
import { requireState } from "./sandboxes/sandbox-table.js";
import { metricsWithin, sandboxLogs, takeMetricsSample } from "./sandboxes/telemetry.js";
import { withTemplateVolumes } from "./sandboxes/volume-mounts.js";
import { startParts } from "./startup.js";
import { templateStart } from "./templates/snapshot-templates.js";
import { findTemplate } from "./templates/templates.js";
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
    try {
      const { reattached, paused } = await startParts(this.#o, this.#p);
      this.#status = { ...this.#status, phase: "ready" };
      this.#p.templates.startCodeInterpreter();
      this.#p.sampler.start();
      this.#log.info({ paused, reattached }, "orchestrator.ready");
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
    return this.#p.lifecycle.launch(row, {
      presentToken: start.presentToken,
      template: input.internal ? undefined : start.pool,
    });
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
    return reconcile(this.#o.catalog, this.#p);
  }

  /**
   * In a cluster, once per heartbeat: drops the paused sandboxes a gateway moved to another
   * node (ClusterCatalog.claimSandbox) and takes in those moved here. Returns how many moved.
   */
  async syncPaused(): Promise<number> {
    return syncPaused(this.#o.catalog, this.#p);
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
    await adoptPaused(this.#o.catalog, this.#p, sandboxId);
    const { snapshotId } = this.#p.table.get(sandboxId).row;
    if (snapshotId) await this.#p.snapshots.localDir(snapshotId);
  }

  /**
   * A paused sandbox moved here joins the table, on its first call or the next sync; read
   * again under its lock (a kill may have just ended it).
   */

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
    await adoptPaused(this.#o.catalog, this.#p, sandboxId);
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
    await adoptPaused(this.#o.catalog, this.#p, sandboxId);
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

  lifecycleEvents(query: LifecycleEventQuery): Promise<LifecycleEventRow[]> {
    return this.#o.catalog.listLifecycleEvents(query);
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

  forkSnapshot(
    snapshot: string,
    teamId: string | undefined,
    input: ForkInput,
  ): Promise<ForkResult[]> {
    assertReady(this.#status);
    return this.#p.forks.forkSnapshot(snapshot, teamId, input);
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
