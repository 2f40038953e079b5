import { stat, statfs } from "node:fs/promises";
import { WarrenError } from "../../shared/index.js";
import { DirWatcher, type WatchEvent } from "./dir-watcher.js";

/** statfs magic numbers of network and FUSE filesystems, which inotify cannot watch reliably. */
const NETWORK_FS_TYPES = new Set([0x6969, 0xff534d42, 0x517b, 0xfe534d42, 0x65735546]);

/** Events kept per polling watcher; past this the oldest are dropped. */
const MAX_BUFFERED_EVENTS = 10_000;

export interface WatchOptions {
  readonly path: string;
  readonly recursive: boolean;
  readonly includeEntry: boolean;
  readonly allowNetworkMounts: boolean;
}

/** Checks that `path` can be watched, as envd does, before any watch is set up. */
export async function checkWatchable(
  opts: Pick<WatchOptions, "path" | "allowNetworkMounts">,
): Promise<void> {
  const info = await stat(opts.path).catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") throw new WarrenError("not_found", `path ${opts.path} not found`);
    throw err;
  });
  if (!info.isDirectory()) {
    throw new WarrenError("invalid_argument", `path ${opts.path} not a directory`);
  }
  if (!opts.allowNetworkMounts) {
    const fs = await statfs(opts.path);
    if (NETWORK_FS_TYPES.has(fs.type)) {
      throw new WarrenError(
        "invalid_argument",
        `cannot watch path on network filesystem: ${opts.path}`,
      );
    }
  }
}

interface PollingWatcher {
  readonly watcher: DirWatcher;
  readonly events: WatchEvent[];
  readonly includeEntry: boolean;
}

/** The polling watchers of CreateWatcher / GetWatcherEvents / RemoveWatcher. */
export class WatchRegistry {
  #next = 1;
  #watchers = new Map<string, PollingWatcher>();

  async create(opts: WatchOptions): Promise<string> {
    await checkWatchable(opts);
    const events: WatchEvent[] = [];
    const watcher = new DirWatcher(opts.path, opts.recursive, (event) => {
      events.push(event);
      if (events.length > MAX_BUFFERED_EVENTS) events.shift();
    });
    const id = `w${this.#next++}`;
    this.#watchers.set(id, { watcher, events, includeEntry: opts.includeEntry });
    return id;
  }

  /** Returns and forgets the events since the last call. */
  take(id: string): { events: WatchEvent[]; includeEntry: boolean } {
    const entry = this.#get(id);
    entry.watcher.drain();
    return { events: entry.events.splice(0), includeEntry: entry.includeEntry };
  }

  remove(id: string): void {
    this.#get(id).watcher.close();
    this.#watchers.delete(id);
  }

  closeAll(): void {
    for (const { watcher } of this.#watchers.values()) watcher.close();
    this.#watchers.clear();
  }

  #get(id: string): PollingWatcher {
    const entry = this.#watchers.get(id);
    if (!entry) throw new WarrenError("not_found", `watcher with id ${id} not found`);
    return entry;
  }
}
