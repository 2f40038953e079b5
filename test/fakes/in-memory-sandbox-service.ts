/**
 * InMemorySandboxService: a STAND-IN for the orchestrator, for API tests only. It boots
 * nothing: sandboxes are records in a Map, templates are names in a Set (add the ones a test
 * creates from). It keeps the `SandboxService` contract (the contract suite runs against it
 * in test/unit/contracts/sandbox-service.test.ts: states, deadlines and TTLs, capacity, fork, snapshots,
 * error reasons), so that API tests exercise routes against faithful answers. It records every
 * call with its arguments so tests can check what the API asked for, and fails a method on
 * demand (`failures`). The real orchestrator runs the same contract on fakes and e2e on VMs.
 */

import {
  DEFAULT_TEAM_ID,
  type LifecycleEventQuery,
  type LifecycleEventRow,
} from "../../src/catalog/index.js";
import { validateEgressPolicy } from "../../src/network/index.js";
import type {
  ClusterNodeService,
  CreateSandboxInput,
  ForkInput,
  ForkResult,
  ListFilter,
  NetworkUpdate,
  NodeStats,
  PauseOptions,
  PublicState,
  ResumeOptions,
  SandboxInfo,
  SandboxLineage,
  SandboxLogEntry,
  SandboxMetric,
  SandboxService,
  SandboxSpan,
  ServerStatus,
  SnapshotInfo,
  SpillingForkInput,
  SpillingForkResult,
} from "../../src/orchestrator/index.js";
import { toWarrenError, WarrenError } from "../../src/shared/index.js";

export interface RecordedCall {
  readonly method: Method;
  readonly args: readonly unknown[];
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

export interface InMemorySandboxServiceOptions {
  /** Running sandboxes at most (creates, resumes and fork children past it: 429). */
  readonly maxSandboxes?: number;
  readonly maxForkCount?: number;
  /** Starts every generated sandbox id (several services side by side: one per node). */
  readonly idPrefix?: string;
}

const SNAPSHOT_NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;

/** What a fork child starts as when its source is not here (another node's, or gone). */
const STAND_IN_SOURCE = {
  templateId: "base",
  alias: "base",
  metadata: {},
  network: { allowOut: [], denyOut: [], allowPublicTraffic: true },
  allowInternetAccess: true,
  lifecycle: { onTimeout: "kill", autoResume: false },
} as const;

/** Every method a test may look for in `calls`. */
type Method = keyof SandboxService | keyof ClusterNodeService;

export class InMemorySandboxService implements SandboxService, ClusterNodeService {
  readonly calls: RecordedCall[] = [];
  readonly sandboxes = new Map<string, Mutable<SandboxInfo>>();
  /** Template names creates may use; persistent snapshots count as templates too. */
  readonly templates = new Set(["base"]);
  readonly snapshots: SnapshotInfo[] = [];
  serverStatus: ServerStatus = { phase: "ready", accelerator: "kvm" };
  metricSamples: SandboxMetric[] = [];
  logEntries: SandboxLogEntry[] = [];
  /** What lifecycleEvents lists from (a test's rows: this fake records none itself). */
  lifecycleEventRows: LifecycleEventRow[] = [];
  /** Thrown by the next call of that method (then cleared). */
  readonly failures = new Map<Method, Error>();
  readonly maxSandboxes: number;
  /** Fork children → their source. */
  readonly forkedFrom = new Map<string, string>();
  readonly maxForkCount: number;
  readonly #idPrefix: string;
  readonly #timers = new Map<string, NodeJS.Timeout>();
  /** Which template each snapshot-made sandbox came from (they block its deletion). */
  readonly #madeFrom = new Map<string, string>();
  private nextId = 1;
  /** Seeded sandboxes start one second apart from here, so tests know their order. */
  private clock = Date.parse("2030-01-01T00:00:00.000Z");

  constructor(options: InMemorySandboxServiceOptions = {}) {
    this.maxSandboxes = options.maxSandboxes ?? Number.POSITIVE_INFINITY;
    this.maxForkCount = options.maxForkCount ?? 16;
    this.#idPrefix = options.idPrefix ?? "sbx";
  }

  /** Calls of one method, in order. */
  callsOf(method: Method): (readonly unknown[])[] {
    return this.calls.filter((c) => c.method === method).map((c) => c.args);
  }

  /** Adds a sandbox directly (e.g. paused ones, or several with the same startedAt). */
  seed(overrides: Partial<SandboxInfo> = {}): SandboxInfo {
    const sandboxId =
      overrides.sandboxId ?? `${this.#idPrefix}${String(this.nextId++).padStart(4, "0")}`;
    this.clock += 1000;
    const startedAt = overrides.startedAt ?? new Date(this.clock);
    const info: Mutable<SandboxInfo> = {
      sandboxId,
      teamId: "default",
      templateId: "base",
      clientId: "warren",
      state: "running",
      metadata: {},
      startedAt,
      endAt: new Date(startedAt.getTime() + 300_000),
      cpuCount: 2,
      memoryMiB: 512,
      diskSizeMiB: 2048,
      envdVersion: "0.6.4",
      network: { allowOut: [], denyOut: [], allowPublicTraffic: true },
      allowInternetAccess: true,
      lifecycle: { onTimeout: "kill", autoResume: false },
      volumeMounts: [],
      ...overrides,
    };
    this.sandboxes.set(sandboxId, info);
    this.#spans.set(sandboxId, { teamId: info.teamId, startedAt: info.startedAt });
    return info;
  }

  status(): ServerStatus {
    return this.serverStatus;
  }

  stats(): NodeStats {
    const sandboxesByState: Record<string, number> = {};
    for (const s of this.sandboxes.values()) {
      sandboxesByState[s.state] = (sandboxesByState[s.state] ?? 0) + 1;
    }
    const running = [...this.sandboxes.values()].filter((s) => s.state === "running");
    return {
      sandboxesByState,
      pool: { ready: 0, memoryMiB: 0, templates: 0 },
      sandboxes: running.map((s) => ({ sandboxId: s.sandboxId, templateId: s.templateId })),
      capacity: {
        maxSandboxes: this.maxSandboxes,
        maxVcpus: 64,
        maxMemoryMiB: 65_536,
        sandboxes: running.length,
        vcpus: running.reduce((n, s) => n + s.cpuCount, 0),
        memoryMiB: running.reduce((n, s) => n + s.memoryMiB, 0),
      },
    };
  }

  readonly #spans = new Map<string, SandboxSpan & { teamId: string }>();

  async teamHistory(teamId: string): Promise<SandboxSpan[]> {
    this.record("teamHistory", teamId);
    return [...this.#spans.values()]
      .filter((span) => span.teamId === teamId)
      .map(({ teamId: _team, ...span }) => span);
  }

  /** Fork children record their source (`forkedFrom`); the rest came from templates. */
  async lineage(): Promise<SandboxLineage[]> {
    return [...this.sandboxes.values()].map((s) => ({
      sandboxId: s.sandboxId,
      templateId: s.templateId,
      ...(this.forkedFrom.has(s.sandboxId)
        ? { parentId: this.forkedFrom.get(s.sandboxId) as string, via: "fork" as const }
        : { via: "template" as const }),
    }));
  }

  async create(input: CreateSandboxInput): Promise<SandboxInfo> {
    this.record("create", input);
    const template = this.findTemplate(input.templateId, input.teamId);
    this.reserve();
    validateEgressPolicy({
      allowInternet: input.allowInternetAccess,
      allowOut: [...input.network.allowOut],
      denyOut: [...input.network.denyOut],
    });
    const sandbox = this.start({
      teamId: input.teamId,
      templateId: template,
      metadata: input.metadata,
      timeoutMs: input.timeoutMs,
      network: input.network,
      allowInternetAccess: input.allowInternetAccess,
      lifecycle: input.lifecycle,
      volumeMounts: (input.volumeMounts ?? []).map(({ name, path }) => ({ name, path })),
      ...(input.secure ? { envdAccessToken: "envd-token" } : {}),
      ...(input.network.allowPublicTraffic ? {} : { trafficAccessToken: "traffic-token" }),
    });
    if (this.snapshots.some((s) => s.templateId === template)) {
      this.#madeFrom.set(sandbox.sandboxId, template);
    }
    return sandbox;
  }

  get(sandboxId: string): SandboxInfo {
    this.record("get", sandboxId);
    return this.find(sandboxId);
  }

  list(filter: ListFilter): SandboxInfo[] {
    this.record("list", filter);
    return [...this.sandboxes.values()]
      .filter((s) => filter.teamId === undefined || s.teamId === filter.teamId)
      .filter((s) => filter.states === undefined || filter.states.includes(s.state))
      .filter((s) => Object.entries(filter.metadata ?? {}).every(([k, v]) => s.metadata[k] === v))
      .filter(
        (s) =>
          filter.template === undefined ||
          s.templateId === filter.template ||
          s.alias === filter.template,
      )
      .filter((s) => filter.startedAfter === undefined || s.startedAt > filter.startedAfter)
      .sort(
        (a, b) =>
          a.startedAt.getTime() - b.startedAt.getTime() ||
          (a.sandboxId < b.sandboxId ? -1 : a.sandboxId > b.sandboxId ? 1 : 0),
      );
  }

  async kill(sandboxId: string): Promise<void> {
    this.record("kill", sandboxId);
    this.find(sandboxId);
    this.remove(sandboxId);
  }

  async pause(sandboxId: string, options?: PauseOptions): Promise<void> {
    this.record("pause", sandboxId, ...(options ? [options] : []));
    const sandbox = this.find(sandboxId);
    if (sandbox.state === "paused") {
      throw new WarrenError("sandbox_paused", `sandbox ${sandboxId} is already paused`);
    }
    this.setState(sandbox, "paused");
  }

  async connect(
    sandboxId: string,
    timeoutMs: number | undefined,
    options?: ResumeOptions,
  ): Promise<{ sandbox: SandboxInfo; resumed: boolean }> {
    this.record("connect", sandboxId, timeoutMs, ...(options ? [options] : []));
    const sandbox = this.find(sandboxId);
    const ttl = timeoutMs ?? 300_000;
    if (sandbox.state === "paused") {
      this.reserve();
      this.setState(sandbox, "running");
      this.setDeadline(sandbox, Date.now() + ttl);
      return { sandbox, resumed: true };
    }
    if (Date.now() + ttl > sandbox.endAt.getTime()) this.setDeadline(sandbox, Date.now() + ttl);
    return { sandbox, resumed: false };
  }

  async resume(
    sandboxId: string,
    timeoutMs: number | undefined,
    autoPause?: boolean,
  ): Promise<SandboxInfo> {
    this.record("resume", sandboxId, timeoutMs, autoPause);
    const sandbox = this.find(sandboxId);
    if (sandbox.state === "running") {
      throw new WarrenError("sandbox_running", `sandbox ${sandboxId} is already running`);
    }
    this.reserve();
    if (autoPause !== undefined) {
      sandbox.lifecycle = { ...sandbox.lifecycle, onTimeout: autoPause ? "pause" : "kill" };
    }
    this.setState(sandbox, "running");
    this.setDeadline(sandbox, Date.now() + (timeoutMs ?? 300_000));
    return sandbox;
  }

  async setTimeout(sandboxId: string, timeoutMs: number): Promise<void> {
    this.record("setTimeout", sandboxId, timeoutMs);
    const sandbox = this.running(sandboxId);
    this.setDeadline(sandbox, Date.now() + timeoutMs);
  }

  async refresh(sandboxId: string, durationMs: number): Promise<void> {
    this.record("refresh", sandboxId, durationMs);
    const sandbox = this.running(sandboxId);
    const wanted = Date.now() + durationMs;
    if (wanted > sandbox.endAt.getTime()) this.setDeadline(sandbox, wanted);
  }

  async metrics(sandboxId: string, window: { start?: Date; end?: Date }): Promise<SandboxMetric[]> {
    this.record("metrics", sandboxId, window);
    this.find(sandboxId);
    return this.metricSamples.filter(
      (m) =>
        (window.start === undefined || m.timestamp >= window.start) &&
        (window.end === undefined || m.timestamp <= window.end),
    );
  }

  async logs(
    sandboxId: string,
    options: { start?: Date; limit?: number },
  ): Promise<SandboxLogEntry[]> {
    this.record("logs", sandboxId, options);
    this.find(sandboxId);
    const after = this.logEntries.filter(
      (e) => options.start === undefined || e.timestamp >= options.start,
    );
    return after.slice(0, options.limit ?? after.length);
  }

  async lifecycleEvents(query: LifecycleEventQuery): Promise<LifecycleEventRow[]> {
    this.record("lifecycleEvents", query);
    const listed = this.lifecycleEventRows.filter(
      (row) =>
        (query.teamId === undefined || row.sandbox.teamId === query.teamId) &&
        (query.sandboxId === undefined || row.sandbox.id === query.sandboxId) &&
        (!query.types?.length || query.types.includes(row.lifecycle)),
    );
    const ordered = [...listed].sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0));
    if (!query.ascending) ordered.reverse();
    return ordered.slice(query.offset, query.offset + query.limit);
  }

  async updateNetwork(sandboxId: string, update: NetworkUpdate): Promise<void> {
    this.record("updateNetwork", sandboxId, update);
    const sandbox = this.find(sandboxId);
    const network = {
      ...sandbox.network,
      allowOut: update.allowOut ?? sandbox.network.allowOut,
      denyOut: update.denyOut ?? sandbox.network.denyOut,
    };
    const allowInternetAccess = update.allowInternetAccess ?? sandbox.allowInternetAccess;
    validateEgressPolicy({
      allowInternet: allowInternetAccess,
      allowOut: [...network.allowOut],
      denyOut: [...network.denyOut],
    });
    sandbox.network = network;
    sandbox.allowInternetAccess = allowInternetAccess;
  }

  async fork(sandboxId: string, input: ForkInput): Promise<ForkResult[]> {
    this.record("fork", sandboxId, input);
    this.#checkCount(input);
    return this.#children(sandboxId, this.find(sandboxId), input, input.count);
  }

  async forkSnapshot(
    snapshot: string,
    teamId: string | undefined,
    input: ForkInput,
  ): Promise<ForkResult[]> {
    this.record("forkSnapshot", snapshot, teamId, input);
    this.#checkCount(input);
    const name = snapshot.replace(/:default$/, "");
    const found = this.snapshots.find(
      (s) =>
        (s.templateId === name || s.names.includes(`${name}:default`)) &&
        (teamId === undefined || (s.teamId ?? DEFAULT_TEAM_ID) === teamId),
    );
    if (!found) throw new WarrenError("template_not_found", `snapshot '${snapshot}' not found`);
    // Its sandbox may be long gone: the children start as its stand-in, from `base`.
    return this.#children(found.sandboxId ?? found.templateId, STAND_IN_SOURCE, input, input.count);
  }

  async forkSpilling(sandboxId: string, input: SpillingForkInput): Promise<SpillingForkResult[]> {
    this.record("forkSpilling", sandboxId, input);
    this.#checkCount(input);
    const here = Math.min(input.count, input.local);
    const children: SpillingForkResult[] = this.#children(
      sandboxId,
      this.find(sandboxId),
      input,
      here,
    );
    for (let i = here; i < input.count; i++) {
      children.push({ spilled: { snapshotId: `fork-of-${sandboxId}` } });
    }
    return children;
  }

  async forkFromCapture(
    sandboxId: string,
    snapshotId: string,
    input: ForkInput,
  ): Promise<ForkResult[]> {
    this.record("forkFromCapture", sandboxId, snapshotId, input);
    this.#checkCount(input);
    // The source is another node's: its children start as its stand-in, from `base`.
    return this.#children(sandboxId, STAND_IN_SOURCE, input, input.count);
  }

  async adopt(sandboxId: string): Promise<void> {
    this.record("adopt", sandboxId);
  }

  async drain(): Promise<void> {
    this.record("drain");
  }

  async undrain(): Promise<void> {
    this.record("undrain");
  }

  #checkCount(input: ForkInput): void {
    if (!Number.isInteger(input.count) || input.count < 1 || input.count > this.maxForkCount) {
      throw new WarrenError(
        "invalid_argument",
        `count must be an integer from 1 to ${this.maxForkCount}, got ${input.count}`,
      );
    }
  }

  #children(
    sandboxId: string,
    source: Pick<
      SandboxInfo,
      "templateId" | "alias" | "metadata" | "network" | "allowInternetAccess" | "lifecycle"
    >,
    input: ForkInput,
    count: number,
  ): ForkResult[] {
    return Array.from({ length: count }, (): ForkResult => {
      try {
        this.reserve();
        const child = this.start({
          templateId: source.templateId,
          alias: source.alias,
          metadata: { ...source.metadata, ...input.metadata },
          timeoutMs: input.timeoutMs ?? 300_000,
          network: source.network,
          allowInternetAccess: source.allowInternetAccess,
          lifecycle: source.lifecycle,
        });
        this.forkedFrom.set(child.sandboxId, sandboxId);
        return { sandbox: child };
      } catch (err) {
        const error = toWarrenError(err);
        return { error: { reason: error.reason, message: error.message } };
      }
    });
  }

  async createSnapshot(sandboxId: string, input: { name?: string }): Promise<SnapshotInfo> {
    this.record("createSnapshot", sandboxId, input);
    const { teamId } = this.find(sandboxId);
    if (input.name !== undefined) {
      if (!SNAPSHOT_NAME.test(input.name)) {
        throw new WarrenError("invalid_argument", `name '${input.name}' is not a valid name`);
      }
      if (this.templates.has(input.name)) {
        throw new WarrenError(
          "template_name_taken",
          `'${input.name}' is a built-in template's name: choose another name`,
        );
      }
      // Names are per team: another team's `name` is neither in the way nor told of.
      if (this.snapshotOf(input.name, teamId)) {
        throw new WarrenError(
          "template_name_taken",
          `a template named '${input.name}' already exists`,
        );
      }
    }
    this.clock += 1000;
    const templateId = `tpl${this.nextId++}`;
    const info: SnapshotInfo = {
      templateId,
      teamId: this.find(sandboxId).teamId,
      snapshotId: `${input.name ?? templateId}:default`,
      names: input.name ? [`${input.name}:default`] : [],
      sandboxId,
      createdAt: new Date(this.clock),
    };
    this.snapshots.push(info);
    return info;
  }

  async listSnapshots(filter: {
    sandboxId?: string;
    name?: string;
    teamId?: string;
  }): Promise<SnapshotInfo[]> {
    this.record("listSnapshots", filter);
    return this.snapshots
      .filter((s) => filter.teamId === undefined || s.teamId === filter.teamId)
      .filter((s) => !filter.sandboxId || s.sandboxId === filter.sandboxId)
      .filter(
        (s) =>
          !filter.name ||
          s.names.includes(filter.name) ||
          s.names.includes(`${filter.name}:default`),
      );
  }

  async deleteTemplate(templateId: string, teamId?: string): Promise<void> {
    this.record("deleteTemplate", templateId);
    if (this.templates.has(templateId)) {
      throw new WarrenError("template_protected", `'${templateId}' is a built-in template`);
    }
    const snapshot = this.snapshotOf(templateId, teamId);
    if (!snapshot)
      throw new WarrenError("template_not_found", `template '${templateId}' not found`);
    const users = [...this.#madeFrom].filter(([, from]) => from === snapshot.templateId);
    if (users.length > 0) {
      throw new WarrenError(
        "template_in_use",
        `snapshot ${templateId} is still used by ${users.map(([id]) => id).join(", ")}`,
      );
    }
    this.snapshots.splice(this.snapshots.indexOf(snapshot), 1);
  }

  private record(method: Method, ...args: unknown[]): void {
    this.calls.push({ method, args });
    const failure = this.failures.get(method);
    if (failure !== undefined) {
      this.failures.delete(method);
      throw failure;
    }
  }

  private find(sandboxId: string): Mutable<SandboxInfo> {
    const sandbox = this.sandboxes.get(sandboxId);
    if (sandbox === undefined) {
      throw new WarrenError("sandbox_not_found", `sandbox ${sandboxId} not found`);
    }
    return sandbox;
  }

  private running(sandboxId: string): Mutable<SandboxInfo> {
    const sandbox = this.find(sandboxId);
    if (sandbox.state === "paused") {
      throw new WarrenError("sandbox_paused", `sandbox ${sandboxId} is paused: resume it first`);
    }
    return sandbox;
  }

  /** A template name or id the team's creates may use (a snapshot's `name:default` included). */
  private findTemplate(idOrName: string, teamId: string): string {
    if (this.templates.has(idOrName)) return idOrName;
    const snapshot = this.snapshotOf(idOrName, teamId);
    if (snapshot) return snapshot.templateId;
    throw new WarrenError("template_not_found", `template '${idOrName}' not found`);
  }

  /**
   * A snapshot by id or name as the team sees it: its own (names are per team); undefined
   * is the admin's view, as the orchestrator's: any team's id, the default team's names.
   */
  private snapshotOf(idOrName: string, teamId: string | undefined): SnapshotInfo | undefined {
    const name = idOrName.replace(/:[^/:]*$/, "");
    const named = (s: SnapshotInfo) =>
      s.snapshotId === idOrName || s.names.includes(`${name}:default`);
    return (
      this.snapshots.find(
        (s) => s.templateId === name && (teamId === undefined || s.teamId === teamId),
      ) ?? this.snapshots.find((s) => named(s) && s.teamId === (teamId ?? DEFAULT_TEAM_ID))
    );
  }

  /** capacity_exhausted when another running sandbox would pass the limit. */
  private reserve(): void {
    const running = [...this.sandboxes.values()].filter((s) => s.state === "running").length;
    if (running >= this.maxSandboxes) {
      throw new WarrenError(
        "capacity_exhausted",
        `node at capacity: ${this.maxSandboxes} sandboxes are running; retry later`,
      );
    }
  }

  /** A new running sandbox, its TTL armed. */
  private start(
    fields: Partial<SandboxInfo> & { readonly templateId: string; readonly timeoutMs: number },
  ): SandboxInfo {
    const { timeoutMs, ...info } = fields;
    const now = Date.now();
    const sandbox = this.seed({
      ...info,
      startedAt: new Date(now),
      endAt: new Date(now + timeoutMs),
    });
    this.armTtl(this.sandboxes.get(sandbox.sandboxId) as Mutable<SandboxInfo>);
    return sandbox;
  }

  private setDeadline(sandbox: Mutable<SandboxInfo>, endAt: number): void {
    sandbox.endAt = new Date(endAt);
    this.armTtl(sandbox);
  }

  private armTtl(sandbox: Mutable<SandboxInfo>): void {
    clearTimeout(this.#timers.get(sandbox.sandboxId));
    const timer = setTimeout(
      () => {
        if (this.sandboxes.get(sandbox.sandboxId) !== sandbox || sandbox.state !== "running")
          return;
        if (sandbox.lifecycle.onTimeout === "pause") this.setState(sandbox, "paused");
        else this.remove(sandbox.sandboxId);
      },
      Math.max(0, sandbox.endAt.getTime() - Date.now()),
    );
    timer.unref();
    this.#timers.set(sandbox.sandboxId, timer);
  }

  private remove(sandboxId: string): void {
    clearTimeout(this.#timers.get(sandboxId));
    this.#timers.delete(sandboxId);
    this.#madeFrom.delete(sandboxId);
    this.sandboxes.delete(sandboxId);
    const span = this.#spans.get(sandboxId);
    if (span) this.#spans.set(sandboxId, { ...span, endedAt: new Date(this.clock) });
  }

  private setState(sandbox: Mutable<SandboxInfo>, state: PublicState): void {
    sandbox.state = state;
    if (state === "paused") clearTimeout(this.#timers.get(sandbox.sandboxId));
  }
}
