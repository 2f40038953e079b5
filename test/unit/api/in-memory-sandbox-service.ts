/**
 * InMemorySandboxService: a STAND-IN for the orchestrator, for API tests only. It boots
 * nothing: sandboxes are records in a Map. It follows the `SandboxService` contract closely
 * enough for the routes to be exercised (not_found for unknown ids, conflict on pausing a
 * paused sandbox, connect resumes or extends) and records every call with its arguments so
 * tests can check what the API asked for. The real orchestrator is exercised by the e2e
 * tests with real VMs.
 */
import type {
  CreateSandboxInput,
  ForkInput,
  ForkResult,
  ListFilter,
  NetworkUpdate,
  PublicState,
  SandboxInfo,
  SandboxLogEntry,
  SandboxMetric,
  SandboxService,
  ServerStatus,
  SnapshotInfo,
} from "../../../src/orchestrator/index.js";
import { WarrenError } from "../../../src/shared/errors.js";

export interface RecordedCall {
  readonly method: keyof SandboxService;
  readonly args: readonly unknown[];
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

export class InMemorySandboxService implements SandboxService {
  readonly calls: RecordedCall[] = [];
  readonly sandboxes = new Map<string, Mutable<SandboxInfo>>();
  serverStatus: ServerStatus = { phase: "ready", accelerator: "kvm" };
  metricSamples: SandboxMetric[] = [];
  logEntries: SandboxLogEntry[] = [];
  /** Thrown by the next call of that method (then cleared). */
  readonly failures = new Map<keyof SandboxService, Error>();
  private nextId = 1;
  private clock = Date.parse("2030-01-01T00:00:00.000Z");

  /** Calls of one method, in order. */
  callsOf(method: keyof SandboxService): (readonly unknown[])[] {
    return this.calls.filter((c) => c.method === method).map((c) => c.args);
  }

  /** Adds a sandbox directly (e.g. paused ones, or several with the same startedAt). */
  seed(overrides: Partial<SandboxInfo> = {}): SandboxInfo {
    const sandboxId = overrides.sandboxId ?? `sbx${String(this.nextId++).padStart(4, "0")}`;
    this.clock += 1000;
    const startedAt = overrides.startedAt ?? new Date(this.clock);
    const info: Mutable<SandboxInfo> = {
      sandboxId,
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
      ...overrides,
    };
    this.sandboxes.set(sandboxId, info);
    return info;
  }

  status(): ServerStatus {
    return this.serverStatus;
  }

  async create(input: CreateSandboxInput): Promise<SandboxInfo> {
    this.record("create", input);
    return this.seed({
      templateId: input.templateId,
      metadata: input.metadata,
      endAt: new Date(this.clock + input.timeoutMs),
      network: input.network,
      allowInternetAccess: input.allowInternetAccess,
      lifecycle: input.lifecycle,
      ...(input.secure ? { envdAccessToken: "envd-token" } : {}),
      ...(input.network.allowPublicTraffic ? {} : { trafficAccessToken: "traffic-token" }),
    });
  }

  get(sandboxId: string): SandboxInfo {
    this.record("get", sandboxId);
    return this.find(sandboxId);
  }

  list(filter: ListFilter): SandboxInfo[] {
    this.record("list", filter);
    return [...this.sandboxes.values()]
      .filter((s) => filter.states === undefined || filter.states.includes(s.state))
      .filter((s) => Object.entries(filter.metadata ?? {}).every(([k, v]) => s.metadata[k] === v))
      .filter((s) => filter.template === undefined || s.templateId === filter.template)
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
    this.sandboxes.delete(sandboxId);
  }

  async pause(sandboxId: string): Promise<void> {
    this.record("pause", sandboxId);
    const sandbox = this.find(sandboxId);
    if (sandbox.state === "paused") {
      throw new WarrenError("conflict", `sandbox ${sandboxId} is already paused`);
    }
    this.setState(sandbox, "paused");
  }

  async connect(
    sandboxId: string,
    timeoutMs: number | undefined,
  ): Promise<{ sandbox: SandboxInfo; resumed: boolean }> {
    this.record("connect", sandboxId, timeoutMs);
    const sandbox = this.find(sandboxId);
    const resumed = sandbox.state === "paused";
    this.setState(sandbox, "running");
    return { sandbox, resumed };
  }

  async resume(
    sandboxId: string,
    timeoutMs: number | undefined,
    autoPause?: boolean,
  ): Promise<SandboxInfo> {
    this.record("resume", sandboxId, timeoutMs, autoPause);
    const sandbox = this.find(sandboxId);
    if (sandbox.state === "running") {
      throw new WarrenError("conflict", `sandbox ${sandboxId} is already running`);
    }
    this.setState(sandbox, "running");
    return sandbox;
  }

  async setTimeout(sandboxId: string, timeoutMs: number): Promise<void> {
    this.record("setTimeout", sandboxId, timeoutMs);
    this.find(sandboxId);
  }

  async refresh(sandboxId: string, durationMs: number): Promise<void> {
    this.record("refresh", sandboxId, durationMs);
    this.find(sandboxId);
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

  async updateNetwork(sandboxId: string, update: NetworkUpdate): Promise<void> {
    this.record("updateNetwork", sandboxId, update);
    this.find(sandboxId);
  }

  readonly snapshots: SnapshotInfo[] = [];

  async fork(sandboxId: string, input: ForkInput): Promise<ForkResult[]> {
    this.record("fork", sandboxId, input);
    const source = this.find(sandboxId);
    return Array.from({ length: input.count }, () => ({
      sandbox: this.seed({
        templateId: source.templateId,
        metadata: { ...source.metadata, ...input.metadata },
      }),
    }));
  }

  async createSnapshot(sandboxId: string, input: { name?: string }): Promise<SnapshotInfo> {
    this.record("createSnapshot", sandboxId, input);
    this.find(sandboxId);
    this.clock += 1000;
    const templateId = `tpl${this.nextId++}`;
    const info: SnapshotInfo = {
      templateId,
      snapshotId: `${input.name ?? templateId}:default`,
      names: input.name ? [`${input.name}:default`] : [],
      sandboxId,
      createdAt: new Date(this.clock),
    };
    this.snapshots.push(info);
    return info;
  }

  async listSnapshots(filter: { sandboxId?: string; name?: string }): Promise<SnapshotInfo[]> {
    this.record("listSnapshots", filter);
    return this.snapshots.filter((s) => !filter.sandboxId || s.sandboxId === filter.sandboxId);
  }

  async deleteTemplate(templateId: string): Promise<void> {
    this.record("deleteTemplate", templateId);
    const index = this.snapshots.findIndex(
      (s) => s.templateId === templateId || s.snapshotId === templateId,
    );
    if (index < 0) throw new WarrenError("not_found", `template ${templateId} not found`);
    this.snapshots.splice(index, 1);
  }

  private record(method: keyof SandboxService, ...args: unknown[]): void {
    this.calls.push({ method, args });
    const failure = this.failures.get(method);
    if (failure !== undefined) {
      this.failures.delete(method);
      throw failure;
    }
  }

  private find(sandboxId: string): Mutable<SandboxInfo> {
    const sandbox = this.sandboxes.get(sandboxId);
    if (sandbox === undefined) throw new WarrenError("not_found", `sandbox ${sandboxId} not found`);
    return sandbox;
  }

  private setState(sandbox: Mutable<SandboxInfo>, state: PublicState): void {
    sandbox.state = state;
  }
}
