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
  ServerStatus,
  SnapshotInfo,
  SpillingForkInput,
  SpillingForkResult,
} from "../orchestrator/index.js";
import { assertReady } from "../orchestrator/index.js";
import { WarrenError } from "../shared/index.js";

type Target = SandboxService & ClusterNodeService & SandboxRouter;

/**
 * Stands in for the orchestrator while the server starts (host setup, accelerator probe,
 * base template), so that the port answers at once: the API 503, the proxy 502, until
 * `bind()` hands over the real one.
 */
export class LateBound implements Target {
  #target: Target | undefined;
  readonly #pending = new Set<(id: string) => void>();

  constructor(readonly startingStatus: () => ServerStatus) {}

  bind(target: Target): void {
    this.#target = target;
    for (const listener of this.#pending) target.onSandboxStopped(listener);
    this.#pending.clear();
  }

  get #real(): Target {
    if (this.#target) return this.#target;
    assertReady(this.startingStatus());
    throw new WarrenError("internal", "the server is ready but has no orchestrator bound");
  }

  status(): ServerStatus {
    return this.#target?.status() ?? this.startingStatus();
  }
  stats(): NodeStats {
    return this.#real.stats();
  }
  async lineage(): Promise<SandboxLineage[]> {
    return this.#real.lineage();
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
  route(id: string, port: number): Promise<RouteResult> {
    return this.#target ? this.#target.route(id, port) : Promise.resolve({ kind: "not_found" });
  }
  sandboxWithToken(matches: (envdAccessToken: string) => boolean): string | undefined {
    return this.#target?.sandboxWithToken(matches);
  }
  onSandboxStopped(listener: (id: string) => void): () => void {
    if (this.#target) return this.#target.onSandboxStopped(listener);
    this.#pending.add(listener);
    return () => this.#pending.delete(listener);
  }
}
