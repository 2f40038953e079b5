import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { EventType } from "../../protocol/gen/filesystem/filesystem_pb.js";
import { WarrenError } from "../../shared/index.js";
import { IN, type InotifyHandle, inotify, type RawInotifyEvent } from "../native/inotify.js";

export interface WatchEvent {
  /** Path relative to the watched directory (`.` for the directory itself). */
  readonly name: string;
  readonly type: EventType;
  readonly path: string;
}

/**
 * Most directories one recursive watch follows, and longest its first walk may take. The walk
 * is synchronous (events must not be missed between listing and watching), so it stalls
 * envd while it runs: a watch of a large tree on a cold disk would for many seconds. inotify
 * watches are a per-user kernel budget too.
 */
const MAX_WATCHED_DIRS = 10_000;
const MAX_WALK_MS = 3_000;

const WATCH_MASK =
  IN.CREATE |
  IN.MODIFY |
  IN.ATTRIB |
  IN.MOVED_FROM |
  IN.MOVED_TO |
  IN.DELETE |
  IN.DELETE_SELF |
  IN.MOVE_SELF |
  IN.ONLYDIR;

/** inotify bits → envd event types, in the order envd emits them for one inotify event. */
const OPS: ReadonlyArray<readonly [number, EventType]> = [
  [IN.CREATE | IN.MOVED_TO, EventType.CREATE],
  [IN.MOVE_SELF | IN.MOVED_FROM, EventType.RENAME],
  [IN.ATTRIB, EventType.CHMOD],
  [IN.MODIFY, EventType.WRITE],
  [IN.DELETE | IN.DELETE_SELF, EventType.REMOVE],
];

function relativeName(dir: string, name: string): string {
  if (!name) return dir || ".";
  return dir ? `${dir}/${name}` : name;
}

/**
 * Watches a directory (optionally its whole tree) with inotify and reports events the way
 * E2B's envd does: one event per operation, names relative to the root, new subdirectories
 * of a recursive watch watched at once with CREATE events for what they already contain.
 */
export class DirWatcher {
  readonly #root: string;
  readonly #recursive: boolean;
  readonly #onEvent: (event: WatchEvent) => void;
  readonly #handle: InotifyHandle;
  /** wd → directory path relative to the root ("" for the root). */
  readonly #dirs = new Map<number, string>();
  #closed = false;
  #starting = true;
  readonly #started = performance.now();
  #rootDev: number | undefined;

  constructor(root: string, recursive: boolean, onEvent: (event: WatchEvent) => void) {
    this.#root = root;
    this.#recursive = recursive;
    this.#onEvent = onEvent;
    this.#handle = inotify().create(() => this.drain());
    try {
      this.#watchTree("", false);
    } catch (err) {
      this.close();
      throw err;
    } finally {
      this.#starting = false;
    }
  }

  /** Delivers every event the kernel has queued so far (also called by pollers before reading). */
  drain(): void {
    if (this.#closed) return;
    for (const raw of inotify().read(this.#handle)) this.#handleRaw(raw);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    inotify().close(this.#handle);
  }

  #watchTree(dir: string, announce: boolean): void {
    const tooMany = this.#dirs.size >= MAX_WATCHED_DIRS;
    if (tooMany || (this.#starting && performance.now() - this.#started > MAX_WALK_MS)) {
      // At start the caller hears why; a tree that grows past it later stops being followed.
      if (this.#starting) {
        const why = tooMany
          ? `watch more than ${MAX_WATCHED_DIRS} directories`
          : `take over ${MAX_WALK_MS / 1000} s to set up (${this.#dirs.size} directories so far)`;
        throw new WarrenError(
          "resource_exhausted",
          `a recursive watch of ${this.#root} would ${why}: watch a smaller tree`,
        );
      }
      return;
    }
    let wd: number;
    try {
      wd = inotify().addWatch(this.#handle, join(this.#root, dir), WATCH_MASK);
    } catch (err) {
      // A subdirectory may vanish between its CREATE and our watch; the root may not.
      if (dir === "") throw err;
      return;
    }
    this.#dirs.set(wd, dir);
    if (!this.#recursive) return;
    let entries: import("node:fs").Dirent[];
    try {
      entries = readdirSync(join(this.#root, dir), { withFileTypes: true });
    } catch {
      return;
    }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const entry of entries) {
      const child = relativeName(dir, entry.name);
      if (announce) this.#emit(child, EventType.CREATE);
      if (entry.isDirectory() && this.#sameFilesystem(child)) this.#watchTree(child, announce);
    }
  }

  /**
   * Whether a subdirectory is on the watched root's filesystem: a recursive watch does not
   * cross mounts (as `find -xdev`), so a watch of `/` follows the rootfs, not /proc, /sys
   * or /dev, whose changes inotify does not report anyway.
   */
  #sameFilesystem(dir: string): boolean {
    try {
      this.#rootDev ??= statSync(this.#root).dev;
      return statSync(join(this.#root, dir)).dev === this.#rootDev;
    } catch {
      return false;
    }
  }

  #forgetTree(dir: string): void {
    for (const [wd, path] of this.#dirs) {
      if (path === dir || path.startsWith(`${dir}/`)) {
        this.#dirs.delete(wd);
        inotify().rmWatch(this.#handle, wd);
      }
    }
  }

  #emit(name: string, type: EventType): void {
    this.#onEvent({ name, type, path: name === "." ? this.#root : join(this.#root, name) });
  }

  #handleRaw(raw: RawInotifyEvent): void {
    if (raw.mask & IN.Q_OVERFLOW) return;
    const dir = this.#dirs.get(raw.wd);
    if (dir === undefined) return;
    if (raw.mask & IN.IGNORED) {
      this.#dirs.delete(raw.wd);
      return;
    }
    const isSelf = raw.name === "";
    // A subdirectory's own delete/move is already reported by its parent's watch.
    if (isSelf && dir !== "") return;
    if (isSelf && this.#recursive && raw.mask & IN.MOVE_SELF) return;
    const name = relativeName(dir, raw.name);
    for (const [bits, type] of OPS) if (raw.mask & bits) this.#emit(name, type);
    if (!this.#recursive || !(raw.mask & IN.ISDIR) || isSelf) return;
    if (raw.mask & (IN.MOVED_FROM | IN.DELETE)) this.#forgetTree(name);
    if (raw.mask & (IN.CREATE | IN.MOVED_TO)) this.#watchTree(name, true);
  }
}
