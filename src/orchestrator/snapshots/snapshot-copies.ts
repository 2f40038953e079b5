import { randomBytes } from "node:crypto";
import { rename, rm, utimes } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "../../shared/index.js";
import type { LifecycleEvents } from "../lifecycle-events.js";

export interface SnapshotCopiesOptions {
  /** The node's snapshots directory: copies lie beside its own snapshots, where chains resolve. */
  readonly dir: string;
  /** Bytes the copies may take; past it, copies nothing here needs go, least recently used first. */
  readonly maxBytes: number;
  /** Fetches snapshot `id` from the shared store into `intoDir` (complete, or not there at all). */
  readonly fetch: (id: string, intoDir: string) => Promise<unknown>;
  /**
   * The copies this node must keep: what its sandboxes, snapshots and warm pool stand on.
   * Asked only when the copies are over budget.
   */
  readonly retained: () => Promise<ReadonlySet<string>>;
  readonly logger: Logger;
  readonly events: LifecycleEvents;
  /**
   * A copy used this recently is kept whatever `retained` says: a restore asks for its
   * directory before anything in the catalog records that it stands on it. Default 2 min.
   */
  readonly graceMs?: number;
}

interface Copy {
  readonly bytes: number;
  lastUsedMs: number;
}

const GRACE_MS = 120_000;

/**
 * This node's copies of other nodes' snapshots, fetched from the shared store on demand (one
 * fetch per snapshot however many restores want it at once) and kept for the next restore,
 * within a budget: room is made before a fetch starts; when the copies would exceed it,
 * those nothing on this node stands on go, least recently used first. If every copy is
 * needed the node stays over budget (logged) rather than fail a restore.
 */
export class SnapshotCopies {
  readonly #o: SnapshotCopiesOptions;
  readonly #copies = new Map<string, Copy>();
  readonly #fetching = new Map<string, Promise<void>>();
  readonly #removing = new Map<string, Promise<void>>();
  /** Bytes of fetches in flight, counted against the budget before they land. */
  #reservedBytes = 0;
  /** Evictions run one at a time. */
  #eviction: Promise<unknown> = Promise.resolve();

  constructor(options: SnapshotCopiesOptions) {
    this.#o = options;
  }

  get usedBytes(): number {
    let used = 0;
    for (const copy of this.#copies.values()) used += copy.bytes;
    return used;
  }

  has(id: string): boolean {
    return this.#copies.has(id);
  }

  /** Indexes a complete copy a previous run left (at start), last used at `lastUsedMs`. */
  adopt(id: string, bytes: number, lastUsedMs: number): void {
    this.#copies.set(id, { bytes, lastUsedMs });
  }

  /** Makes sure the copy of `id` (of `bytes`, as recorded) is here, fetching it if need be. */
  async ensure(id: string, bytes: number): Promise<void> {
    const copy = this.#copies.get(id);
    if (copy) {
      copy.lastUsedMs = Date.now();
      // The directory's mtime carries recency across a restart (adopt).
      const now = new Date();
      await utimes(join(this.#o.dir, id), now, now).catch(() => {});
      return;
    }
    let fetching = this.#fetching.get(id);
    if (!fetching) {
      fetching = this.#fetch(id, bytes).finally(() => this.#fetching.delete(id));
      this.#fetching.set(id, fetching);
    }
    await fetching;
  }

  /** Removes the copy of `id` now: nothing in the cluster uses that snapshot any more. */
  async drop(id: string): Promise<void> {
    await this.#fetching.get(id)?.catch(() => {});
    if (this.#copies.has(id)) await this.#remove(id);
    else await this.#removing.get(id);
  }

  /** Evicts what the budget has no room for (see the class); the ids evicted. */
  evict(): Promise<string[]> {
    const run = this.#eviction.then(() => this.#evict());
    this.#eviction = run.catch(() => {});
    return run;
  }

  /** Waits for the fetches and removals under way. */
  async close(): Promise<void> {
    await Promise.allSettled([
      ...this.#fetching.values(),
      ...this.#removing.values(),
      this.#eviction,
    ]);
  }

  async #fetch(id: string, bytes: number): Promise<void> {
    await this.#removing.get(id);
    this.#reservedBytes += bytes;
    try {
      await this.evict();
      await this.#o.fetch(id, join(this.#o.dir, id));
      this.#copies.set(id, { bytes, lastUsedMs: Date.now() });
    } finally {
      this.#reservedBytes -= bytes;
    }
  }

  #overBudget(): number {
    return this.usedBytes + this.#reservedBytes - this.#o.maxBytes;
  }

  async #evict(): Promise<string[]> {
    if (this.#overBudget() <= 0) return [];
    const retained = await this.#o.retained();
    const recent = Date.now() - (this.#o.graceMs ?? GRACE_MS);
    const candidates = [...this.#copies]
      .filter(([id, copy]) => !retained.has(id) && copy.lastUsedMs < recent)
      .sort(([, a], [, b]) => a.lastUsedMs - b.lastUsedMs)
      .map(([id]) => id);
    const evicted: string[] = [];
    for (const id of candidates) {
      if (this.#overBudget() <= 0) break;
      // Used again while the catalog was read: kept.
      const copy = this.#copies.get(id);
      if (!copy || copy.lastUsedMs >= recent) continue;
      await this.#remove(id);
      evicted.push(id);
    }
    if (this.#overBudget() > 0)
      this.#o.logger.warn(
        {
          usedBytes: this.usedBytes,
          reservedBytes: this.#reservedBytes,
          maxBytes: this.#o.maxBytes,
        },
        "snapshot_copies.over_budget",
      );
    return evicted;
  }

  /** Out of the index at once, renamed away (atomic: a restore never sees half a copy), deleted. */
  async #remove(id: string): Promise<void> {
    const copy = this.#copies.get(id);
    this.#copies.delete(id);
    const path = join(this.#o.dir, id);
    const removal = (async () => {
      // Dot-named: not a snapshot id, so a crash before the delete leaves what start removes.
      const doomed = join(this.#o.dir, `.${id}.${randomBytes(6).toString("hex")}.evicting`);
      await rename(path, doomed).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== "ENOENT") throw err;
      });
      await rm(doomed, { recursive: true, force: true });
    })().finally(() => this.#removing.delete(id));
    this.#removing.set(id, removal);
    await removal;
    this.#o.events.emit("snapshot_copies.removed", { snapshotId: id, bytes: copy?.bytes });
  }
}
