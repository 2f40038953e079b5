/**
 * The body of Warren's `GET /node` (not E2B's): what a node holds now. The dashboard's node
 * view and `warren top` read it; the node's API builds it from `Orchestrator.stats()`.
 */
export interface NodeView {
  readonly status: string;
  readonly accelerator: string | null;
  /** Sandboxes the node tracks, by state (running, paused, pausing, …). */
  readonly sandboxesByState: Readonly<Record<string, number>>;
  /** Warmed VMMs ready, their guest memory, and the templates with a pool. */
  readonly pool: { readonly ready: number; readonly memoryMiB: number; readonly templates: number };
  /** Running sandboxes' latest metrics sample (absent until one is taken). */
  readonly sandboxes: readonly {
    readonly sandboxId: string;
    readonly templateId: string;
    readonly cpuUsedPct?: number;
    readonly memUsedBytes?: number;
  }[];
  /**
   * VM starts under way and waiting their turn, and the queue's bounds (absent from a node
   * that starts no VMs).
   */
  readonly starts?: {
    readonly starting: number;
    readonly queued: number;
    readonly concurrency: number;
    readonly maxQueued: number;
  };
  /** Admission limits and what is reserved of them (warm VMMs included). */
  readonly capacity: {
    readonly maxSandboxes: number;
    readonly maxVcpus: number;
    readonly maxMemoryMiB: number;
    readonly sandboxes: number;
    readonly vcpus: number;
    readonly memoryMiB: number;
  };
}
