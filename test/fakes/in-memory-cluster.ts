/**
 * A stand-in for the cluster catalog (PostgreSQL's, in production) as the gateway uses it:
 * nodes in a map, and where a sandbox lives answered by a locator the test supplies (its
 * stand-in nodes know their sandboxes). Records state changes so tests can check them.
 */
import { randomBytes } from "node:crypto";
import type { DownNode } from "../../src/catalog/index.js";
import type {
  GatewayCluster,
  NodeRow,
  NodeState,
  SandboxLocation,
} from "../../src/gateway/cluster.js";

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

export class InMemoryCluster implements GatewayCluster {
  readonly nodes = new Map<string, Mutable<NodeRow>>();
  /** Sandboxes the cluster reports lost (a node marked down held them). */
  readonly lost = new Set<string>();
  /** Sandboxes reported paused, with a published snapshot (claimSandbox may move them). */
  readonly paused = new Set<string>();
  /** Sandboxes moved by claimSandbox, to the node now holding them. */
  readonly claimed = new Map<string, string>();

  /** What the stand-in nodes check internal calls against. */
  readonly key = randomBytes(32).toString("base64url");

  constructor(private readonly locator: (sandboxId: string) => string | undefined) {}

  async clusterKey(): Promise<string> {
    return this.key;
  }

  addNode(node: Pick<NodeRow, "id" | "url" | "capacity">): void {
    const now = new Date().toISOString();
    this.nodes.set(node.id, {
      state: "up",
      labels: {},
      registeredAt: now,
      lastHeartbeat: now,
      heartbeatAgeMs: 0,
      ...node,
    });
  }

  heartbeat(id: string, load?: NodeRow["load"]): void {
    const node = this.nodes.get(id);
    if (!node) throw new Error(`no node ${id}`);
    node.lastHeartbeat = new Date().toISOString();
    if (load) node.load = load;
  }

  /** Makes a node look silent for `ms` (as the database's clock would say). */
  age(id: string, ms: number): void {
    const node = this.nodes.get(id);
    if (node) node.lastHeartbeat = new Date(Date.now() - ms).toISOString();
  }

  async listNodes(): Promise<NodeRow[]> {
    return [...this.nodes.values()].map((node) => ({
      ...node,
      heartbeatAgeMs: Date.now() - Date.parse(node.lastHeartbeat),
    }));
  }

  async setNodeState(id: string, state: NodeState): Promise<void> {
    const node = this.nodes.get(id);
    if (node) node.state = state;
  }

  async markDownStale(olderThanMs: number): Promise<DownNode[]> {
    const down: DownNode[] = [];
    for (const node of this.nodes.values()) {
      if (node.state === "down") continue;
      const heartbeatAgeMs = Date.now() - Date.parse(node.lastHeartbeat);
      if (heartbeatAgeMs <= olderThanMs) continue;
      node.state = "down";
      down.push({ ...node, heartbeatAgeMs, lost: [] });
    }
    return down;
  }

  async locateSandbox(id: string): Promise<SandboxLocation | undefined> {
    const nodeId = this.claimed.get(id) ?? this.locator(id);
    const node = nodeId === undefined ? undefined : this.nodes.get(nodeId);
    if (!node) return undefined;
    return {
      nodeId: node.id,
      nodeUrl: node.url,
      state: this.lost.has(id) ? "killed" : this.paused.has(id) ? "paused" : "running",
      nodeState: node.state,
      vcpus: 1,
      memoryMiB: 256,
      ...(this.lost.has(id) ? { endedReason: "lost" } : {}),
    };
  }

  async claimSandbox(id: string, toNodeId: string, fromNodeId?: string): Promise<boolean> {
    const at = this.claimed.get(id) ?? this.locator(id);
    if (!this.paused.has(id) || (fromNodeId !== undefined && at !== fromNodeId)) return false;
    this.claimed.set(id, toNodeId);
    return true;
  }
}
