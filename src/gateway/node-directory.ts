import type { Logger } from "../shared/index.js";
import type { GatewayCluster, NodeRow } from "./cluster.js";
import type { Reserved } from "./placement.js";

export interface NodeDirectoryOptions {
  readonly cluster: GatewayCluster;
  /** How often the node list is re-read (ms); nodes heartbeat on about this period. */
  readonly refreshMs: number;
  /** A node silent for longer is marked down, its running sandboxes lost (ms). */
  readonly downAfterMs: number;
  readonly logger: Logger;
}

/**
 * The gateway's view of the nodes: the catalog's list, re-read every `refreshMs`, plus the
 * room this gateway has promised to creates since each node last reported its load (so a
 * burst between two heartbeats does not all land on the node that looked emptiest). Each
 * refresh also marks silent nodes down; any number of gateways may do so at once (the
 * catalog's change is atomic).
 */
export class NodeDirectory {
  readonly #o: NodeDirectoryOptions;
  #nodes: NodeRow[] = [];
  /** performance.now() when #nodes was read. */
  #readAt = 0;
  #loaded: Promise<void> | undefined;
  readonly #reserved = new Map<string, Reserved & { heartbeat: string }>();
  #timer: NodeJS.Timeout | undefined;
  #waiters: (() => void)[] = [];

  constructor(options: NodeDirectoryOptions) {
    this.#o = options;
  }

  start(): void {
    this.#timer = setInterval(() => {
      this.refresh().catch((err: unknown) =>
        this.#o.logger.warn({ err }, "gateway.nodes_refresh_failed"),
      );
    }, this.#o.refreshMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#wake();
  }

  /** The nodes as last read (read once first). */
  async nodes(): Promise<readonly NodeRow[]> {
    this.#loaded ??= this.refresh();
    await this.#loaded;
    return this.#nodes;
  }

  /** Milliseconds since the node list was read. */
  get sinceReadMs(): number {
    return performance.now() - this.#readAt;
  }

  get reserved(): ReadonlyMap<string, Reserved> {
    return this.#reserved;
  }

  async refresh(): Promise<void> {
    const down = await this.#o.cluster.markDownStale(this.#o.downAfterMs);
    for (const node of down) this.#o.logger.warn({ nodeId: node.id }, "gateway.node_down");
    this.#nodes = await this.#o.cluster.listNodes();
    this.#readAt = performance.now();
    for (const node of this.#nodes) {
      // A newer heartbeat's load already counts what was sent before it.
      const reserved = this.#reserved.get(node.id);
      if (reserved && reserved.heartbeat !== node.lastHeartbeat) this.#reserved.delete(node.id);
    }
    this.#wake();
  }

  /** Counts a create sent to `node` until the node's next heartbeat reports it. */
  reserve(node: NodeRow, room: Omit<Reserved, "sandboxes">): () => void {
    const entry = this.#reserved.get(node.id) ?? {
      sandboxes: 0,
      vcpus: 0,
      memoryMiB: 0,
      heartbeat: node.lastHeartbeat,
    };
    entry.sandboxes += 1;
    entry.vcpus += room.vcpus;
    entry.memoryMiB += room.memoryMiB;
    this.#reserved.set(node.id, entry);
    let released = false;
    return () => {
      // A create the node refused took nothing.
      if (released || this.#reserved.get(node.id) !== entry) return;
      released = true;
      entry.sandboxes -= 1;
      entry.vcpus -= room.vcpus;
      entry.memoryMiB -= room.memoryMiB;
      this.#wake();
    };
  }

  /** Settles at the next refresh or release, or after `ms`: room may have appeared. */
  changed(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      timer.unref();
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.#waiters.push(done);
    });
  }

  #wake(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const wake of waiters) wake();
  }

  /** The node with this id as last read. */
  async node(id: string): Promise<NodeRow | undefined> {
    return (await this.nodes()).find((n) => n.id === id);
  }
}
