import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { readFile, rename, stat, writeFile } from "node:fs/promises";
import { WarrenError } from "../shared/index.js";

export function sha256Text(text: string | Buffer): string {
  return createHash("sha256").update(text).digest("hex");
}

export async function sha256File(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 20 })) hash.update(chunk);
  return hash.digest("hex");
}

interface CachedHash {
  dev: number;
  ino: number;
  size: number;
  mtimeMs: number;
  ctimeMs: number;
  sha256: string;
}

/**
 * sha256 of files, remembered by (device, inode, size, mtime, ctime) like git's index: a file
 * whose stat is unchanged is not read again, so checking a multi-GB artifact costs one stat().
 * Any write changes ctime (which no one can set back), so a modified file is always re-hashed.
 */
export class FileHashCache {
  readonly #path: string;
  readonly #entries: Map<string, CachedHash>;
  #dirty = false;

  private constructor(path: string, entries: Map<string, CachedHash>) {
    this.#path = path;
    this.#entries = entries;
  }

  static async load(path: string): Promise<FileHashCache> {
    let entries = new Map<string, CachedHash>();
    try {
      const parsed = JSON.parse(await readFile(path, "utf8")) as Record<string, CachedHash>;
      entries = new Map(Object.entries(parsed));
    } catch {
      // Missing or unreadable: start empty, everything gets hashed once.
    }
    return new FileHashCache(path, entries);
  }

  /** The file's sha256; undefined when it does not exist. */
  async hash(path: string): Promise<string | undefined> {
    const st = await stat(path).catch(() => undefined);
    if (!st?.isFile()) return undefined;
    const known = this.#entries.get(path);
    if (
      known &&
      known.dev === st.dev &&
      known.ino === st.ino &&
      known.size === st.size &&
      known.mtimeMs === st.mtimeMs &&
      known.ctimeMs === st.ctimeMs
    )
      return known.sha256;
    const sha256 = await sha256File(path);
    const after = await stat(path);
    this.#entries.set(path, {
      dev: after.dev,
      ino: after.ino,
      size: after.size,
      mtimeMs: after.mtimeMs,
      ctimeMs: after.ctimeMs,
      sha256,
    });
    this.#dirty = true;
    return sha256;
  }

  /** Hashes of several files, keyed by the given names; throws naming the first missing one. */
  async hashAll(files: Readonly<Record<string, string>>): Promise<Record<string, string>> {
    const out: Record<string, string> = {};
    for (const [name, path] of Object.entries(files)) {
      const sha = await this.hash(path);
      if (!sha) throw new WarrenError("not_found", `${path} is missing`);
      out[name] = sha;
    }
    return out;
  }

  async save(): Promise<void> {
    if (!this.#dirty) return;
    const tmp = `${this.#path}.${process.pid}.tmp`;
    await writeFile(tmp, `${JSON.stringify(Object.fromEntries(this.#entries), null, 1)}\n`);
    await rename(tmp, this.#path);
    this.#dirty = false;
  }
}
