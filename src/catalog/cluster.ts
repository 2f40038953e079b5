import type { SandboxRow, SandboxState, TeamUsage } from "./catalog.js";

/**
 * The cluster seam: what gateways and node servers share about each other through one
 * PostgreSQL database (`postgres/postgres-cluster.ts`). Nodes register and heartbeat;
 * gateways list nodes to place sandboxes, locate a sandbox to route to it, mark dead nodes
 * down and move paused sandboxes between nodes. A node's own sandboxes are written through
 * its `Catalog` (PostgresCatalog, scoped to its node id); this interface reads them across
 * nodes and changes them only in the few cluster-wide ways below.
 *
 * Times are ISO 8601 strings from the database's clock, never a caller's, so that machines
 * whose clocks disagree still agree on what is stale.
 */

/**
 * "up": takes new sandboxes. "draining": serves the sandboxes it has, takes no new ones.
 * "down": considered dead (markDownStale) or taken out (setNodeState); route nothing to it.
 */
export type NodeState = "up" | "draining" | "down";

export interface NodeCapacity {
  readonly vcpus: number;
  readonly memoryMiB: number;
  readonly maxSandboxes: number;
}

/** What a node reports with each heartbeat. */
export interface NodeLoad {
  /** Sandboxes it holds that are not killed (paused ones included). */
  readonly sandboxes: number;
  readonly vcpusUsed: number;
  readonly memoryMiBUsed: number;
  /** Template ids with a warm (pre-spawned) VMM ready: a create of one of them is fastest. */
  readonly warmTemplates: readonly string[];
  /** The node itself is draining (e.g. shutting down). Informative: it does not set `state`. */
  readonly draining: boolean;
}

export interface NodeRegistration {
  /** Stable across the node's restarts: its catalog's node id. */
  readonly id: string;
  /** Base URL of the node server's API and proxy, e.g. "http://10.0.0.5:3000". */
  readonly url: string;
  readonly capacity: NodeCapacity;
  /** Free-form placement hints ("zone": "a"); `{}` when absent. */
  readonly labels?: Readonly<Record<string, string>>;
}

export interface NodeRow {
  readonly id: string;
  readonly url: string;
  readonly state: NodeState;
  readonly capacity: NodeCapacity;
  readonly labels: Readonly<Record<string, string>>;
  /** The last heartbeat's load; absent until the first heartbeat after registering. */
  readonly load?: NodeLoad;
  /** When it last registered. */
  readonly registeredAt: string;
  /** When it last registered or heartbeat. */
  readonly lastHeartbeat: string;
  /** Milliseconds since lastHeartbeat when the row was read, by the database's clock. */
  readonly heartbeatAgeMs: number;
}

/** Where a gateway sends a sandbox's traffic. */
export interface SandboxLocation {
  /** The team that owns it: a gateway routes another team's request nowhere. */
  readonly teamId: string;
  readonly nodeId: string;
  readonly nodeUrl: string;
  /** The sandbox's own state ("killed" rows are history: route nothing to them). */
  readonly state: SandboxState;
  readonly nodeState: NodeState;
  /** Its shape: what another node needs free to resume it there. */
  readonly vcpus: number;
  readonly memoryMiB: number;
  /** Why a killed sandbox ended ("lost": its node was marked down); absent otherwise. */
  readonly endedReason?: string;
}

/** A sandbox as seen across the cluster: its row plus the node that holds it. */
export interface ClusterSandboxRow extends SandboxRow {
  readonly nodeId: string;
}

/** A node markDownStale marked down (as it is now: state "down"), with what it lost. */
export interface DownNode extends NodeRow {
  /**
   * Its sandboxes the call made `killed` with endedReason "lost", by id, each with the state
   * it had: every creating, running, pausing, resuming or killing one, and every paused one
   * whose snapshot is not published (its files are on the dead node alone). Paused
   * sandboxes whose snapshot is published are left paused and absent here: another node
   * can claim (claimSandbox) and resume them.
   */
  readonly lost: readonly { readonly sandboxId: string; readonly was: SandboxState }[];
}

/**
 * The event each sandbox markDownStale loses gets in its history: what a node records of a
 * sandbox it finds lost at a restart (orchestrator/events.ts `sandbox.lost`), a `killed`
 * lifecycle event to its team (GET /events/sandboxes), in the same transaction.
 */
export const LOST_EVENT = {
  kind: "sandbox.lost",
  lifecycle: "sandbox.lifecycle.killed",
  reason: "lost: its node stopped answering",
} as const;

export interface ClusterCatalog {
  /**
   * Adds the node or updates it (url, capacity, labels): state becomes "up", registeredAt
   * and lastHeartbeat now, load absent. A node registers at start, after its restart
   * recovery, and again whenever heartbeat says it is "down".
   */
  registerNode(node: NodeRegistration): Promise<void>;
  /**
   * Records the node's load and sets lastHeartbeat to now. Does not change state: returns
   * the node's state so that a node marked "down" (its running sandboxes already reported
   * lost) learns it and registers again. A node never registered: not_found.
   */
  heartbeat(id: string, load: NodeLoad): Promise<NodeState>;
  /** Every registered node, by id. */
  listNodes(): Promise<NodeRow[]>;
  /**
   * Sets a node's state (an operator draining or retiring a node, a node leaving on a
   * graceful stop); touches no sandbox, so a node set "down" keeps its sandboxes' rows as
   * they were. An unknown id changes nothing (no error).
   */
  setNodeState(id: string, state: NodeState): Promise<void>;
  /**
   * Marks "down" every node not already down whose lastHeartbeat is more than `olderThanMs`
   * ago, and turns its sandboxes lost (see DownNode), in one transaction; returns those
   * nodes by id ([] when none). Several gateways may run it at once: each node is marked
   * down, and its sandboxes reported, by exactly one call; the others see nothing to do.
   * Sandbox rows are never deleted.
   */
  markDownStale(olderThanMs: number): Promise<DownNode[]>;

  /** The node holding the sandbox, undefined when there is no such sandbox (or its node never registered). */
  locateSandbox(id: string): Promise<SandboxLocation | undefined>;
  /** Sandboxes of every node (or `nodeId`'s), in `states` (all when absent), by startedAt then id. */
  listSandboxes(filter?: {
    states?: readonly SandboxState[];
    nodeId?: string;
  }): Promise<ClusterSandboxRow[]>;
  /**
   * What `teamId`'s sandboxes hold on every node, counted as a node's own admission counts
   * it (HOLDING_STATES; Warren's internal VMs aside): one aggregate row, however many
   * sandboxes the cluster runs.
   */
  teamUsage(teamId: string): Promise<TeamUsage>;
  /**
   * Moves a paused sandbox to `toNodeId`, so that node's catalog sees it and can resume it
   * there (fetching its snapshot from the shared store); its snapshot row stays with the
   * node that captured it. A compare-and-set: it moves only if, at that moment, the sandbox
   * is paused, its snapshot is published (markPublished) and (when `fromNodeId` is given)
   * it is still on `fromNodeId`. Two gateways racing to move one sandbox should both pass
   * the node locateSandbox gave them: exactly one gets true. True when moved (also when it
   * was already on `toNodeId`); false when the sandbox is gone, not paused, unpublished or
   * not on `fromNodeId`.
   */
  claimSandbox(id: string, toNodeId: string, fromNodeId?: string): Promise<boolean>;

  /**
   * Records that a snapshot's files are in the shared store (publishedAt = now, kept if
   * already set). False when no node has that snapshot.
   */
  markPublished(snapshotId: string): Promise<boolean>;

  /** Idempotent; calls after it reject as `unavailable`. */
  close(): Promise<void>;
}
