import { createHash } from "node:crypto";
import type { FileHandle } from "node:fs/promises";
import { lstat, readdir } from "node:fs/promises";
import { inDir, openDirectory } from "../by-descriptor.js";

/**
 * NFSv3 file handles of one volume: 8 bytes naming the volume, 8 the inode. NFSv3 keeps no
 * state between calls, so a guest's mount carries on across pause, resume, fork and a new
 * server process: a handle still names the same file. The server finds a file from its
 * inode through the names it has seen (LOOKUP, READDIR, CREATE…); an inode it has not seen
 * (a server started after the guest mounted) is searched for in the tree, bounded.
 */
export const HANDLE_BYTES = 16;
const MAX_SEARCHED = 200_000;
const MAX_DEPTH = 4096;

interface Place {
  readonly parent: bigint;
  readonly name: string;
}

export class Handles {
  readonly #root: string;
  readonly #key: string;
  readonly #prefix: Buffer;
  readonly #rootIno: bigint;
  /** Where each inode seen was last seen: its parent's inode and its name there. */
  readonly #places = new Map<bigint, Place>();

  private constructor(root: string, volumeKey: string, rootIno: bigint) {
    this.#root = root;
    this.#key = volumeKey;
    this.#prefix = createHash("sha256").update(volumeKey).digest().subarray(0, 8);
    this.#rootIno = rootIno;
  }

  static async open(root: string, volumeKey: string): Promise<Handles> {
    const stats = await lstat(root, { bigint: true });
    return new Handles(root, volumeKey, stats.ino);
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
    if (ino !== this.#rootIno) this.#places.set(ino, { parent, name });
  }

  forget(ino: bigint): void {
    this.#places.delete(ino);
  }

  /**
   * The names from the root to `ino` (empty for the root), or undefined when it cannot be
   * found (removed: the client's handle is stale).
   */
  async namesOf(ino: bigint): Promise<string[] | undefined> {
    const known = this.#walkUp(ino);
    if (known) return known;
    await this.#search(ino);
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

  /** Walks the tree breadth first, recording what it sees, until `ino` is among it. */
  async #search(ino: bigint): Promise<void> {
    const queue: { names: string[]; ino: bigint }[] = [{ names: [], ino: this.#rootIno }];
    let searched = 0;
    while (queue.length > 0 && searched < MAX_SEARCHED) {
      const { names, ino: dirIno } = queue.shift() as { names: string[]; ino: bigint };
      let dir: FileHandle;
      try {
        dir = await openDirectory(this.#root, names);
      } catch {
        continue;
      }
      try {
        for (const name of await readdir(`/proc/self/fd/${dir.fd}`)) {
          searched++;
          const stats = await lstat(inDir(dir, name), { bigint: true }).catch(() => undefined);
          if (!stats) continue;
          this.seen(stats.ino, dirIno, name);
          if (stats.ino === ino) return;
          if (stats.isDirectory() && names.length < MAX_DEPTH) {
            queue.push({ names: [...names, name], ino: stats.ino });
          }
        }
      } finally {
        await dir.close();
      }
    }
  }
}
