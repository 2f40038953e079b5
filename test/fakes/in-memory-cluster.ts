/**
 * InMemoryCluster: a STAND-IN for PostgresCluster, for the gateway's unit tests: the same
 * `ClusterCatalog` contract (test/contracts/cluster.contract.ts runs against it), kept in
 * maps. Nodes' own rows are written through `catalog(nodeId)`, an InMemoryCatalog scoped to
 * that node on the cluster's store, as each node's PostgresCatalog writes the shared
 * database. Times are this process's clock; `age()` makes a node look silent.
 */
import { randomUUID } from "node:crypto";
import {
  type ClusterCatalog,
  type ClusterSandboxRow,
  type DownNode,
  LOST_EVENT,
  type NodeLoad,
  type NodeRegistration,
  type NodeRow,
  type NodeState,
  type SandboxLocation,
  type SandboxState,
  type TeamUsage,
} from "../../src/catalog/index.js";
import { WarrenError } from "../../src/shared/index.js";
import {
  type CatalogStore,
  emptyCatalogStore,
  InMemoryCatalog,
  teamUsageIn,
} from "./in-memory-catalog.js";
import { InMemoryTeams } from "./in-memory-teams.js";

/** A node's row as kept: heartbeatAgeMs is computed when read. */
type NodeRecord = Omit<NodeRow, "heartbeatAgeMs" | "state" | "load" | "lastHeartbeat"> & {
  state: NodeState;
  load?: NodeLoad;
  lastHeartbeat: string;
};

/** States a node marked down loses outright (paused ones only without a published snapshot). */
const LOST_STATES: ReadonlySet<SandboxState> = new Set([
  "creating",
  "running",
  "pausing",
  "resuming",
  "killing",
]);

const byId = (a: { id: string }, b: { id: string }) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

export class InMemoryCluster implements ClusterCatalog {
  /** Registered nodes by id (tests may read them). */
  readonly nodes = new Map<string, NodeRecord>();
  /** Teams and keys of the cluster (gateways and stand-in nodes authenticate with them). */
  readonly teams = new InMemoryTeams();
  readonly #store: CatalogStore = emptyCatalogStore();
  #open = true;
  /** A node's own catalog on the cluster's store (as PostgresCatalog with its node id). */
  catalog(nodeId: string): InMemoryCatalog {
    return new InMemoryCatalog(this.#store, nodeId);
  }

  /** Makes a node look silent for `ms` (as the database's clock would say). */
  age(id: string, ms: number): void {
    const node = this.nodes.get(id);
    if (node) node.lastHeartbeat = new Date(Date.now() - ms).toISOString();
  }

  async registerNode(node: NodeRegistration): Promise<void> {
    this.#check();
    const now = new Date().toISOString();
    this.nodes.set(node.id, {
      id: node.id,
      url: node.url,
      capacity: { ...node.capacity },
      labels: { ...(node.labels ?? {}) },
      state: "up",
      registeredAt: now,
      lastHeartbeat: now,
    });
  }

  async heartbeat(id: string, load: NodeLoad): Promise<NodeState> {
    this.#check();
    const node = this.nodes.get(id);
    if (!node) throw new WarrenError("not_found", `heartbeat of node ${id}: no such node`);
    node.load = structuredClone(load);
    node.lastHeartbeat = new Date().toISOString();
    return node.state;
  }

  async listNodes(): Promise<NodeRow[]> {
    this.#check();
    return [...this.nodes.values()].sort(byId).map((node) => this.#row(node));
  }

  async setNodeState(id: string, state: NodeState): Promise<void> {
    this.#check();
    const node = this.nodes.get(id);
    if (node) node.state = state;
  }

  async markDownStale(olderThanMs: number): Promise<DownNode[]> {
    this.#check();
    const down: DownNode[] = [];
    for (const node of [...this.nodes.values()].sort(byId)) {
      if (node.state === "down" || this.#ageOf(node) <= olderThanMs) continue;
      node.state = "down";
      down.push({ ...this.#row(node), lost: this.#loseSandboxesOf(node.id) });
    }
    return down;
  }

  async locateSandbox(id: string): Promise<SandboxLocation | undefined> {
    this.#check();
    const row = this.#store.sandboxes.get(id);
    const node = this.nodes.get(this.#store.sandboxNodes.get(id) ?? "");
    if (!row || !node) return undefined;
    return {
      teamId: row.teamId,
      nodeId: node.id,
      nodeUrl: node.url,
      state: row.state,
      nodeState: node.state,
      vcpus: row.vcpus,
      memoryMiB: row.memoryMiB,
      ...(row.endedReason !== undefined && { endedReason: row.endedReason }),
    };
  }

  async teamUsage(teamId: string): Promise<TeamUsage> {
    this.#check();
    return teamUsageIn(this.#store.sandboxes.values(), teamId);
  }

  async listSandboxes(
    filter: { states?: readonly SandboxState[]; nodeId?: string } = {},
  ): Promise<ClusterSandboxRow[]> {
    this.#check();
    const rows: ClusterSandboxRow[] = [];
    for (const [id, row] of this.#store.sandboxes) {
      const nodeId = this.#store.sandboxNodes.get(id) ?? "";
      if (filter.states && !filter.states.includes(row.state)) continue;
      if (filter.nodeId !== undefined && nodeId !== filter.nodeId) continue;
      rows.push(structuredClone({ ...row, nodeId }));
    }
    return rows.sort((a, b) =>
      a.startedAt !== b.startedAt ? (a.startedAt < b.startedAt ? -1 : 1) : byId(a, b),
    );
  }

  async claimSandbox(id: string, toNodeId: string, fromNodeId?: string): Promise<boolean> {
    this.#check();
    const row = this.#store.sandboxes.get(id);
    const at = this.#store.sandboxNodes.get(id);
    if (row?.state !== "paused" || !this.#published(row.snapshotId)) return false;
    if (fromNodeId !== undefined && at !== fromNodeId) return false;
    this.#store.sandboxNodes.set(id, toNodeId);
    this.#store.sandboxes.set(id, { ...row, updatedAt: new Date().toISOString() });
    return true;
  }

  async markPublished(snapshotId: string): Promise<boolean> {
    this.#check();
    if (!this.#store.snapshots.has(snapshotId)) return false;
    if (!this.#store.published.has(snapshotId))
      this.#store.published.set(snapshotId, new Date().toISOString());
    return true;
  }

  async close(): Promise<void> {
    this.#open = false;
  }

  /** The node's sandboxes it takes down with it, made killed ("lost"), by id. */
  #loseSandboxesOf(nodeId: string): DownNode["lost"] {
    const lost: { sandboxId: string; was: SandboxState }[] = [];
    const now = new Date().toISOString();
    for (const [id, row] of [...this.#store.sandboxes].sort(([a], [b]) => (a < b ? -1 : 1))) {
      if (this.#store.sandboxNodes.get(id) !== nodeId) continue;
      const paused = row.state === "paused" && !this.#published(row.snapshotId);
      if (!LOST_STATES.has(row.state) && !paused) continue;
      this.#store.sandboxes.set(id, {
        ...row,
        state: "killed",
        endedReason: "lost",
        updatedAt: now,
      });
      lost.push({ sandboxId: id, was: row.state });
      const { kind, lifecycle, reason } = LOST_EVENT;
      this.#store.events.push({
        row: { at: now, sandboxId: id, kind, detail: { state: row.state, reason }, lifecycle },
        id: randomUUID(),
        teamId: row.teamId,
      });
    }
    return lost;
  }

  #published(snapshotId: string | undefined): boolean {
    return snapshotId !== undefined && this.#store.published.has(snapshotId);
  }

  #ageOf(node: NodeRecord): number {
    return Date.now() - Date.parse(node.lastHeartbeat);
  }

  #row(node: NodeRecord): NodeRow {
    return structuredClone({ ...node, heartbeatAgeMs: this.#ageOf(node) });
  }

  #check(): void {
    if (!this.#open) throw new WarrenError("unavailable", "the cluster catalog is closed");
  }
}
