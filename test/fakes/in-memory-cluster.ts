/**
 * A stand-in for the cluster catalog (PostgreSQL's, in production) as the gateway uses it:
 * nodes in a map, and where a sandbox lives answered by a locator the test supplies (its
 * stand-in nodes know their sandboxes). Records state changes so tests can check them.
 */
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
  /** Sandboxes moved by claimSandbox, to the node now holding them. */
  readonly claimed = new Map<string, string>();

  constructor(private readonly locator: (sandboxId: string) => string | undefined) {}

  addNode(node: Omit<NodeRow, "state" | "lastHeartbeat"> & Partial<NodeRow>): void {
    this.nodes.set(node.id, { state: "up", lastHeartbeat: new Date().toISOString(), ...node });
  }

  heartbeat(id: string, load?: NodeRow["load"]): void {
    const node = this.nodes.get(id);
    if (!node) throw new Error(`no node ${id}`);
    node.lastHeartbeat = new Date().toISOString();
    if (load) node.load = load;
  }

  async listNodes(): Promise<NodeRow[]> {
    return [...this.nodes.values()].map((node) => ({ ...node }));
  }

  async setNodeState(id: string, state: NodeState): Promise<void> {
    const node = this.nodes.get(id);
    if (node) node.state = state;
  }

  async markDownStale(olderThanMs: number): Promise<{ id: string }[]> {
    const down: { id: string }[] = [];
    for (const node of this.nodes.values()) {
      if (node.state === "down") continue;
      if (Date.now() - Date.parse(node.lastHeartbeat) <= olderThanMs) continue;
      node.state = "down";
      down.push({ id: node.id });
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
      state: this.lost.has(id) ? "killed" : "running",
      nodeState: node.state,
      ...(this.lost.has(id) ? { endedReason: "lost" } : {}),
    };
  }

  async claimSandbox(id: string, toNodeId: string): Promise<boolean> {
    this.claimed.set(id, toNodeId);
    return true;
  }
}
