import { mkdir, readdir, rename, rm, stat, utimes } from "node:fs/promises";
import { join } from "node:path";
import { type Logger, silentLogger, WarrenError } from "../shared/index.js";
import { tempBeside } from "./local-files.js";
import { assertId, isValidId, notPublished, type SharedStore } from "./shared-store.js";

export interface SnapshotCacheOptions {
  readonly store: Pick<SharedStore, "manifest" | "fetch">;
  /** The cache's directory (under the node's data dir), one subdirectory per snapshot. */
  readonly dir: string;
  /** Bytes cached snapshots may take; past it, unpinned ones go, least recently used first. */
  readonly maxBytes: number;
  readonly logger?: Logger;
}

/** A snapshot held in the cache while a VM uses its files. */
export interface CachePin {
  readonly id: string;
  readonly dir: string;
  /** Lets the snapshot be evicted again; calling it twice is harmless. */
  release(): void;
}

export interface EvictionResult {
  readonly evicted: readonly string[];
  /** Bytes still over the budget because everything left is pinned (or being fetched). */
  readonly overBudgetBytes: number;
}

interface Entry {
  readonly bytes: number;
  /** Recency: a counter, seeded at open from the directories' mtimes (touched on each use). */
  lastUsed: number;
}

/**
 * A bounded local cache of snapshots fetched from a SharedStore. `pin` (or `ensure`) fetches
 * on demand, one fetch per snapshot however many ask at once. When the snapshots cached and
 * being fetched exceed `maxBytes`, unpinned ones are evicted, least recently used first; if
 * everything is pinned the cache stays over budget (logged) rather than fail a restore. A
 * directory appears by rename once complete and leaves by rename to a dot-name, so `open`
 * rebuilds the index from what it finds and removes dot-named leftovers.
 */
export class SnapshotCache {
  readonly #o: SnapshotCacheOptions;
  readonly #log: Logger;
  readonly #entries = new Map<string, Entry>();
  readonly #pins = new Map<string, number>();
  readonly #fetching = new Map<string, Promise<void>>();
  readonly #removing = new Map<string, Promise<void>>();
  readonly #background = new Set<Promise<unknown>>();
  /** Bytes of fetches in flight: counted against the budget before they land. */
  #reserved = 0;
  #clock = 0;

  private constructor(options: SnapshotCacheOptions) {
    this.#o = options;
    this.#log = options.logger ?? silentLogger;
  }

  /** Opens (creating) the cache directory and indexes what a previous run left in it. */
  static async open(options: SnapshotCacheOptions): Promise<SnapshotCache> {
    if (!Number.isSafeInteger(options.maxBytes) || options.maxBytes < 0)
      throw new WarrenError("invalid_argument", "maxBytes must be an integer ≥ 0");
    const cache = new SnapshotCache(options);
    await cache.#rebuild();
    return cache;
  }

  get usedBytes(): number {
    let used = 0;
    for (const entry of this.#entries.values()) used += entry.bytes;
    return used;
  }

  has(id: string): boolean {
    return this.#entries.has(id);
  }

  /** The local directory of snapshot `id`, fetched first if need be. */
  async ensure(id: string): Promise<string> {
    assertId(id);
    await this.#removing.get(id);
    const entry = this.#entries.get(id);
    if (entry) {
      await this.#touch(id, entry);
      return this.#path(id);
    }
    let loading = this.#fetching.get(id);
    if (!loading) {
      loading = this.#load(id).finally(() => this.#fetching.delete(id));
      this.#fetching.set(id, loading);
    }
    await loading;
    return this.#path(id);
  }

  /** ensure(), and keeps the snapshot from eviction until the pin is released. */
  async pin(id: string): Promise<CachePin> {
    assertId(id);
    // Counted before anything awaits, so no eviction can slip in between fetch and pin.
    this.#pins.set(id, (this.#pins.get(id) ?? 0) + 1);
    let dir: string;
    try {
      dir = await this.ensure(id);
    } catch (err) {
      this.#unpin(id);
      throw err;
    }
    let released = false;
    return {
      id,
      dir,
      release: () => {
        if (released) return;
        released = true;
        this.#unpin(id);
      },
    };
  }

  /** Evicts unpinned snapshots, least recently used first, until within the budget. */
  async evict(): Promise<EvictionResult> {
    const evicted: string[] = [];
    for (;;) {
      const over = this.usedBytes + this.#reserved - this.#o.maxBytes;
      if (over <= 0) return { evicted, overBudgetBytes: 0 };
      const victim = this.#leastRecentlyUsed();
      if (!victim) {
        this.#log.warn(
          { usedBytes: this.usedBytes, reservedBytes: this.#reserved, maxBytes: this.#o.maxBytes },
          "snapshot_cache.over_budget",
        );
        return { evicted, overBudgetBytes: over };
      }
      await this.#remove(victim);
      evicted.push(victim);
    }
  }

  /** Drops one snapshot unless it is pinned; false if pinned or not cached. */
  async remove(id: string): Promise<boolean> {
    assertId(id);
    if (!this.#entries.has(id) || (this.#pins.get(id) ?? 0) > 0) return false;
    await this.#remove(id);
    return true;
  }

  /** Waits for the fetches and evictions under way. */
  async close(): Promise<void> {
    await Promise.allSettled([...this.#fetching.values(), ...this.#background]);
  }

  #path(id: string): string {
    return join(this.#o.dir, id);
  }

  async #touch(id: string, entry: Entry): Promise<void> {
    entry.lastUsed = ++this.#clock;
    // The mtime carries recency across a restart; losing one touch only reorders eviction.
    const now = new Date();
    await utimes(this.#path(id), now, now).catch(() => {});
  }

  #leastRecentlyUsed(): string | undefined {
    let victim: string | undefined;
    let oldest = Number.POSITIVE_INFINITY;
    for (const [id, entry] of this.#entries) {
      if ((this.#pins.get(id) ?? 0) > 0 || entry.lastUsed >= oldest) continue;
      victim = id;
      oldest = entry.lastUsed;
    }
    return victim;
  }

  async #load(id: string): Promise<void> {
    const started = Date.now();
    const manifest = await this.#o.store.manifest(id);
    if (!manifest) throw notPublished(id);
    const bytes = manifest.files.reduce((sum, f) => sum + f.bytes, 0);
    this.#reserved += bytes;
    try {
      await this.evict();
      await this.#o.store.fetch(id, this.#path(id));
      this.#entries.set(id, { bytes, lastUsed: ++this.#clock });
    } finally {
      this.#reserved -= bytes;
    }
    this.#log.info(
      { snapshotId: id, bytes, durationMs: Date.now() - started },
      "snapshot_cache.fetched",
    );
  }

  /** Out of the index at once, then renamed away (atomic) before the slow delete. */
  async #remove(id: string): Promise<void> {
    const entry = this.#entries.get(id);
    this.#entries.delete(id);
    const removal = (async () => {
      const doomed = tempBeside(this.#path(id), "evicting");
      await rename(this.#path(id), doomed);
      await rm(doomed, { recursive: true, force: true });
    })().finally(() => this.#removing.delete(id));
    this.#removing.set(id, removal);
    await removal;
    this.#log.info({ snapshotId: id, bytes: entry?.bytes }, "snapshot_cache.evicted");
  }

  #unpin(id: string): void {
    const left = (this.#pins.get(id) ?? 1) - 1;
    if (left > 0) this.#pins.set(id, left);
    else this.#pins.delete(id);
    if (left > 0 || this.usedBytes + this.#reserved <= this.#o.maxBytes) return;
    const eviction = this.evict()
      .catch((err: unknown) => this.#log.warn({ err }, "snapshot_cache.evict_failed"))
      .finally(() => this.#background.delete(eviction));
    this.#background.add(eviction);
  }

  /** Indexes complete snapshot directories (oldest mtime least recent); removes leftovers. */
  async #rebuild(): Promise<void> {
    const { dir } = this.#o;
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const found: { id: string; bytes: number; mtimeMs: number }[] = [];
    let leftovers = 0;
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.name.startsWith(".")) {
        await rm(path, { recursive: true, force: true });
        leftovers += 1;
      } else if (entry.isDirectory() && isValidId(entry.name)) {
        let bytes = 0;
        for (const name of await readdir(path)) bytes += (await stat(join(path, name))).size;
        found.push({ id: entry.name, bytes, mtimeMs: (await stat(path)).mtimeMs });
      }
    }
    found.sort((a, b) => a.mtimeMs - b.mtimeMs);
    for (const { id, bytes } of found) this.#entries.set(id, { bytes, lastUsed: ++this.#clock });
    this.#log.info(
      { entries: found.length, usedBytes: this.usedBytes, leftovers },
      "snapshot_cache.opened",
    );
    await this.evict();
  }
}
