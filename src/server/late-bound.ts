import type {
  ClusterNodeService,
  CreateSandboxInput,
  ForkInput,
  ForkResult,
  ListFilter,
  NetworkUpdate,
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
  WakeCheck,
} from "../orchestrator/index.js";
import { assertReady } from "../orchestrator/index.js";
import { WarrenError } from "../shared/index.js";

/**
 * A part of the node that exists once it has started (the orchestrator, the template
 * builds, the team catalog): the one way the node says "not ready yet". Until `bind()`,
 * `get()` throws the readiness gate's error (503 not_ready, or start_failed).
 */
export class Late<T> {
  #value: T | undefined;

  constructor(readonly status: () => ServerStatus) {}

  bind(value: T): void {
    this.#value = value;
  }

  /** The part, if bound. */
  get current(): T | undefined {
    return this.#value;
  }

  get(): T {
    if (this.#value !== undefined) return this.#value;
    assertReady(this.status());
    throw new WarrenError("internal", "the server is ready but a part of it was never bound");
  }
}

type Target = SandboxService & ClusterNodeService & SandboxRouter;

/**
 * The orchestrator before it exists, as the API and the proxy see it (both take it at once,
 * the port answering while the server starts): each call goes to what `bind()` handed over,
 * or fails as `Late.get()` does; the proxy's routing answers 502, and stop listeners wait.
 */
export class LateBound implements Target {
  readonly #late: Late<Target>;
  readonly #pending = new Set<(id: string) => void>();

  constructor(readonly startingStatus: () => ServerStatus) {
    this.#late = new Late(startingStatus);
  }

  bind(target: Target): void {
    this.#late.bind(target);
    for (const listener of this.#pending) target.onSandboxStopped(listener);
    this.#pending.clear();
  }

  /** The orchestrator, once bound. */
  get current(): Target | undefined {
    return this.#late.current;
  }

  get #real(): Target {
    return this.#late.get();
  }

  status(): ServerStatus {
    return this.#late.current?.status() ?? this.startingStatus();
  }
  stats(): NodeStats {
    return this.#real.stats();
  }
  async lineage(): Promise<SandboxLineage[]> {
    return this.#real.lineage();
  }
  teamHistory(teamId: string): Promise<SandboxSpan[]> {
    return this.#real.teamHistory(teamId);
  }
  async create(input: CreateSandboxInput): Promise<SandboxInfo> {
    return this.#real.create(input);
  }
  get(id: string): SandboxInfo {
    return this.#real.get(id);
  }
  list(filter: ListFilter): SandboxInfo[] {
    return this.#real.list(filter);
  }
  async kill(id: string): Promise<void> {
    return this.#real.kill(id);
  }
  async pause(id: string, options?: PauseOptions): Promise<void> {
    return this.#real.pause(id, options);
  }
  async connect(id: string, timeoutMs: number | undefined, options?: ResumeOptions) {
    return this.#real.connect(id, timeoutMs, options);
  }
  async resume(
    id: string,
    timeoutMs: number | undefined,
    autoPause?: boolean,
    options?: ResumeOptions,
  ): Promise<SandboxInfo> {
    return this.#real.resume(id, timeoutMs, autoPause, options);
  }
  async setTimeout(id: string, timeoutMs: number): Promise<void> {
    return this.#real.setTimeout(id, timeoutMs);
  }
  async refresh(id: string, durationMs: number): Promise<void> {
    return this.#real.refresh(id, durationMs);
  }
  async metrics(id: string, window: { start?: Date; end?: Date }): Promise<SandboxMetric[]> {
    return this.#real.metrics(id, window);
  }
  async logs(id: string, options: { start?: Date; limit?: number }): Promise<SandboxLogEntry[]> {
    return this.#real.logs(id, options);
  }
  async updateNetwork(id: string, update: NetworkUpdate): Promise<void> {
    return this.#real.updateNetwork(id, update);
  }
  async fork(id: string, input: ForkInput): Promise<ForkResult[]> {
    return this.#real.fork(id, input);
  }
  async forkSpilling(id: string, input: SpillingForkInput): Promise<SpillingForkResult[]> {
    return this.#real.forkSpilling(id, input);
  }
  async forkFromCapture(id: string, snapshotId: string, input: ForkInput): Promise<ForkResult[]> {
    return this.#real.forkFromCapture(id, snapshotId, input);
  }
  async adopt(id: string): Promise<void> {
    return this.#real.adopt(id);
  }
  async drain(): Promise<void> {
    return this.#real.drain();
  }
  async undrain(): Promise<void> {
    return this.#real.undrain();
  }
  async createSnapshot(id: string, input: { name?: string }): Promise<SnapshotInfo> {
    return this.#real.createSnapshot(id, input);
  }
  async listSnapshots(filter: { sandboxId?: string; name?: string }): Promise<SnapshotInfo[]> {
    return this.#real.listSnapshots(filter);
  }
  async deleteTemplate(templateId: string): Promise<void> {
    return this.#real.deleteTemplate(templateId);
  }
  route(id: string, port: number, mayWake: WakeCheck): Promise<RouteResult> {
    const target = this.#late.current;
    return target ? target.route(id, port, mayWake) : Promise.resolve({ kind: "not_found" });
  }
  sandboxWithToken(matches: (envdAccessToken: string) => boolean): string | undefined {
    return this.#late.current?.sandboxWithToken(matches);
  }
  onSandboxStopped(listener: (id: string) => void): () => void {
    const target = this.#late.current;
    if (target) return target.onSandboxStopped(listener);
    this.#pending.add(listener);
    return () => this.#pending.delete(listener);
  }
}
