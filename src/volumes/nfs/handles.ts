import { createHash } from "node:crypto";
import type { FileHandle } from "node:fs/promises";
import { lstat, readdir } from "node:fs/promises";
import { inDir, openDirectory } from "../by-descriptor.js";
import { type NfsWork, newWork } from "./work.js";

/**
 * NFSv3 file handles of one volume: 8 bytes naming the volume, 8 the inode. NFSv3 keeps no
 * state between calls, so a guest's mount carries on across pause, resume, fork and a new
 * server process: a handle still names the same file. The server finds a file from its
 * inode through the names it has seen (LOOKUP, READDIR, CREATE…); an inode it has not seen
 * (a server started after the guest mounted) is searched for by one walk of the tree.
 *
 * A guest can send handles of inodes nobody has (forged), as fast as it likes, so that walk
 * is bounded and rare: bounded in entries and time, one at a time per volume (calls for
 * inodes not known wait for the walk under way), at most WALK_PROCESS_LIMIT walks at once in
 * the process (each takes one libuv thread at a time, and there are four), and its outcome
 * is remembered for WALK_INTERVAL_MS: an inode that walk did not see is STALE until then.
 */
export const HANDLE_BYTES = 16;

export interface WalkLimits {
  /** Entries (names read, plus a directory's depth each time one is opened) per walk. */
  readonly entries: number;
  /** Milliseconds per walk. */
  readonly ms: number;
  /** How long a walk's outcome stands: inodes it did not see are unknown until then. */
  readonly intervalMs: number;
}

const WALK: WalkLimits = { entries: 200_000, ms: 10_000, intervalMs: 60_000 };
/** Walks of any volume at once in the process. */
const WALK_PROCESS_LIMIT = 2;
/** Deepest directory a walk enters, and longest chain of places followed up to the root. */
const MAX_DEPTH = 4096;
/** Places remembered per volume (~150 B each); the oldest seen go first. */
const MAX_PLACES = 262_144;

interface Place {
  readonly parent: bigint;
  readonly name: string;
}

export interface HandlesOptions {
  readonly work?: NfsWork;
  readonly walk?: Partial<WalkLimits>;
  readonly maxPlaces?: number;
}

export class Handles {
  readonly #root: string;
  readonly #key: string;
  readonly #prefix: Buffer;
  readonly #rootIno: bigint;
  readonly #work: NfsWork;
  readonly #walkLimits: WalkLimits;
  readonly #maxPlaces: number;
  /** Where each inode seen was last seen: its parent's inode and its name there. */
  readonly #places = new Map<bigint, Place>();
  /** The walk under way, if any. */
  #walk: Promise<void> | undefined;
  /** When the last walk ended (performance.now()); none yet: -Infinity. */
  #walkedAt = Number.NEGATIVE_INFINITY;

  private constructor(root: string, volumeKey: string, rootIno: bigint, options: HandlesOptions) {
    this.#root = root;
    this.#key = volumeKey;
    this.#prefix = createHash("sha256").update(volumeKey).digest().subarray(0, 8);
    this.#rootIno = rootIno;
    this.#work = options.work ?? newWork();
    this.#walkLimits = { ...WALK, ...options.walk };
    this.#maxPlaces = options.maxPlaces ?? MAX_PLACES;
  }

  static async open(root: string, volumeKey: string, options: HandlesOptions = {}) {
    const stats = await lstat(root, { bigint: true });
    return new Handles(root, volumeKey, stats.ino, options);
  }

  get rootIno(): bigint {
    return this.#rootIno;
  }

  /** The volume's directory. */
  get root(): string {
    return this.#root;
  }

  /** What names the volume (its id): mounted as `/<key>`. */
  get key(): string {
    return this.#key;
  }

  handleOf(ino: bigint): Buffer {
    const handle = Buffer.allocUnsafe(HANDLE_BYTES);
    this.#prefix.copy(handle, 0);
    handle.writeBigUInt64BE(ino, 8);
    return handle;
  }

  /** The inode a handle names, or undefined when it is not one of this volume's. */
  inoOf(handle: Buffer): bigint | undefined {
    if (handle.length !== HANDLE_BYTES || !handle.subarray(0, 8).equals(this.#prefix)) {
      return undefined;
    }
    return handle.readBigUInt64BE(8);
  }

  /** Records that `ino` is `name` in the directory `parent`. */
  seen(ino: bigint, parent: bigint, name: string): void {
    if (ino === this.#rootIno) return;
    // Re-inserted: the map's order is the order last seen, the oldest first to go.
    this.#places.delete(ino);
    this.#places.set(ino, { parent, name });
    if (this.#places.size > this.#maxPlaces) {
      const oldest = this.#places.keys().next().value;
      if (oldest !== undefined) this.#places.delete(oldest);
    }
  }

  forget(ino: bigint): void {
    this.#places.delete(ino);
  }

  /**
   * The names from the root to `ino` (empty for the root), or undefined when it cannot be
   * found (removed, forged, or not seen by the last walk: the client's handle is stale).
   */
  async namesOf(ino: bigint): Promise<string[] | undefined> {
    const known = this.#walkUp(ino);
    if (known) return known;
    if (!this.#walk) {
      if (performance.now() - this.#walkedAt < this.#walkLimits.intervalMs) return undefined;
      this.#walk = walkGate(() => this.#search()).finally(() => {
        this.#walkedAt = performance.now();
        this.#walk = undefined;
      });
    }
    await this.#walk;
    return this.#walkUp(ino);
  }

  #walkUp(ino: bigint): string[] | undefined {
    const names: string[] = [];
    let at = ino;
    for (let depth = 0; at !== this.#rootIno; depth++) {
      const place = this.#places.get(at);
      if (!place || depth > MAX_DEPTH) return undefined;
      names.push(place.name);
      at = place.parent;
    }
    return names.reverse();
  }

  /** Walks the tree breadth first, recording every entry it sees, within its limits. */
  async #search(): Promise<void> {
    this.#work.treeWalks++;
    const limits = this.#walkLimits;
    const began = performance.now();
    let budget = limits.entries;
    const spent = () => --budget <= 0 || performance.now() - began > limits.ms;
    // Directories to read, each by its parent's index here and its name: O(1) apiece.
    const queue: QueuedDir[] = [{ ino: this.#rootIno, parent: -1, name: "", depth: 0 }];
    for (let next = 0; next < queue.length; next++) {
      const { ino: dirIno, depth } = queue[next] as QueuedDir;
      budget -= depth; // opening it walks down from the root
      if (spent()) return;
      let dir: FileHandle;
      try {
        dir = await openDirectory(this.#root, namesTo(queue, next));
      } catch {
        continue;
      }
      try {
        // A directory that cannot be read (gone, swapped) is skipped, not the walk.
        const names = await readdir(`/proc/self/fd/${dir.fd}`).catch(() => []);
        for (const name of names) {
          if (spent()) return;
          this.#work.entriesWalked++;
          const stats = await lstat(inDir(dir, name), { bigint: true }).catch(() => undefined);
          if (!stats) continue;
          this.seen(stats.ino, dirIno, name);
          if (stats.isDirectory() && depth < MAX_DEPTH) {
            queue.push({ ino: stats.ino, parent: next, name, depth: depth + 1 });
          }
        }
      } finally {
        await dir.close().catch(() => {});
      }
    }
  }
}

interface QueuedDir {
  readonly ino: bigint;
  /** Its parent's index in the queue (-1: the root). */
  readonly parent: number;
  readonly name: string;
  readonly depth: number;
}

/** The names from the root to the queue's directory at `index`. */
function namesTo(queue: readonly QueuedDir[], index: number): string[] {
  const names: string[] = [];
  for (let at = queue[index]; at && at.parent >= 0; at = queue[at.parent]) names.push(at.name);
  return names.reverse();
}

/** Runs walks at most WALK_PROCESS_LIMIT at a time across the process. */
let walking = 0;
const waiting: (() => void)[] = [];

async function walkGate(walk: () => Promise<void>): Promise<void> {
  // A slot is taken here, or handed over by the walk that ends (never both).
  if (walking >= WALK_PROCESS_LIMIT) await new Promise<void>((resolve) => waiting.push(resolve));
  else walking++;
  try {
    await walk();
  } finally {
    const next = waiting.shift();
    if (next) next();
    else walking--;
  }
}
