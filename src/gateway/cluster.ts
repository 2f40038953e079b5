/**
 * What the gateway reads and changes in the cluster's catalog (PostgreSQL's ClusterCatalog
 * implements it): node membership and where each sandbox lives. Nothing else: every call about
 * a sandbox itself is the node's, relayed.
 */
export type NodeState = "up" | "draining" | "down";

export interface NodeRow {
  readonly id: string;
  readonly url: string;
  readonly state: NodeState;
  /** ISO 8601, the database's clock. */
  readonly lastHeartbeat: string;
  readonly capacity: {
    readonly vcpus: number;
    readonly memoryMiB: number;
    readonly maxSandboxes: number;
  };
  readonly load?: {
    readonly sandboxes: number;
    readonly vcpusUsed: number;
    readonly memoryMiBUsed: number;
    readonly warmTemplates: readonly string[];
    readonly draining: boolean;
  };
}

export interface SandboxLocation {
  readonly nodeId: string;
  readonly nodeUrl: string;
  /** The sandbox's lifecycle state (killed rows carry why they ended). */
  readonly state: string;
  readonly nodeState: NodeState;
  readonly endedReason?: string;
}

export interface GatewayCluster {
  listNodes(): Promise<NodeRow[]>;
  setNodeState(id: string, state: NodeState): Promise<void>;
  /** Marks nodes silent for longer than this down (their running sandboxes lost); returns them. */
  markDownStale(olderThanMs: number): Promise<readonly { readonly id: string }[]>;
  locateSandbox(id: string): Promise<SandboxLocation | undefined>;
  /** Moves a paused sandbox to another node (compare-and-set); false when it was not paused. */
  claimSandbox(id: string, toNodeId: string): Promise<boolean>;
}
