import { once } from "node:events";
import { type FileHandle, lchown, link, lutimes, mkdir, open, rm, symlink } from "node:fs/promises";
import { Readable } from "node:stream";
import { Parser, type ReadEntry } from "tar";
import { WarrenError } from "../shared/index.js";
import {
  cleanComponents,
  type ImageDir,
  type ImageEntry,
  ImageTree,
  lstatEntry,
  OPEN_DIRECTORY,
  OPEN_NEW,
} from "./image-tree.js";
import { decompressor, sniffCompression } from "./layer-decompress.js";

const WHITEOUT_PREFIX = ".wh.";
const OPAQUE_WHITEOUT = ".wh..wh..opq";

export interface ApplyLayerOptions {
  /** The directory being assembled: every write stays inside it. */
  readonly root: string;
  /** Bytes of file content this layer may still write (bounds a decompression bomb). */
  readonly maxBytes: number;
  /** Set owners from the archive (needs root); otherwise files belong to whoever runs this. */
  readonly preserveOwners?: boolean;
}

export interface LayerStats {
  readonly entries: number;
  readonly bytes: number;
  readonly whiteouts: number;
  /** Character/block devices and FIFOs: not created (the guest's /dev is a devtmpfs). */
  readonly skippedNodes: number;
}

/**
 * Applies one layer (a tar stream, gzip or zstd compressed or not) onto `root`, as OCI's
 * image-layer spec says: entries in order, replacing what lower layers left; `.wh.<name>`
 * deletes `<name>`; `.wh..wh..opq` empties its directory of lower layers' entries; hard links
 * point at paths inside the root. Every path is resolved inside the root as a chroot would,
 * directory by directory through open descriptors (image-tree.ts), and nothing done to an
 * entry follows a symlink at it, so a hostile layer cannot read, write, chown, chmod or touch
 * anything outside the root.
 */
export async function applyLayer(
  source: Readable,
  options: ApplyLayerOptions,
): Promise<LayerStats> {
  const tree = await ImageTree.open(options.root);
  try {
    return await applyTo(tree, source, options);
  } finally {
    await tree.close();
  }
}

async function applyTo(
  tree: ImageTree,
  source: Readable,
  options: ApplyLayerOptions,
): Promise<LayerStats> {
  const applier = new LayerApplier(tree, options);
  const parser = new Parser({ strict: true });
  let failure: unknown;
  let chain = Promise.resolve();
  parser.on("entry", (entry: ReadEntry) => {
    // The parser emits the next entry only once this one has ended, so entries apply in order.
    chain = chain.then(async () => {
      if (failure !== undefined) return entry.resume();
      try {
        await applier.apply(entry);
      } catch (err) {
        failure = err;
        entry.resume();
      }
    });
  });
  const ended = new Promise<void>((resolve, reject) => {
    parser.on("end", resolve);
    parser.on("error", (err: Error) =>
      reject(new WarrenError("image_invalid", `layer is not a valid tar: ${err.message}`)),
    );
  });
  ended.catch(() => {});
  const [head, rest] = await peek(source);
  const transform = decompressor(sniffCompression(head));
  const tarStream = transform ? rest.pipe(transform) : rest;
  rest.on("error", (err) => tarStream.destroy(err));
  try {
    for await (const chunk of tarStream as AsyncIterable<Buffer>) {
      if (failure !== undefined) break;
      if (!parser.write(chunk)) await Promise.race([once(parser, "drain"), ended]);
    }
    parser.end();
    await ended;
    await chain;
  } catch (err) {
    throw err instanceof WarrenError
      ? err
      : new WarrenError("image_invalid", `cannot read layer: ${(err as Error).message}`, {
          cause: err,
        });
  } finally {
    source.destroy();
  }
  if (failure !== undefined) throw failure;
  await applier.finish();
  return applier.stats();
}

/** The first bytes of a stream (to sniff its compression) and a stream of all of it. */
async function peek(source: Readable): Promise<[Buffer, Readable]> {
  const iterator = source[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  const first = await iterator.next();
  const head = first.done ? Buffer.alloc(0) : Buffer.from(first.value);
  const all = async function* () {
    if (head.length > 0) yield head;
    for (;;) {
      const next = await iterator.next();
      if (next.done) return;
      yield next.value;
    }
  };
  return [head, Readable.from(all(), { objectMode: false })];
}

class LayerApplier {
  readonly #tree: ImageTree;
  readonly #options: ApplyLayerOptions;
  /** Paths (inside the image) this layer wrote: an opaque whiteout keeps them. */
  readonly #written = new Set<string>();
  /** Directories' times, set once the layer is done (writing inside changes them). */
  readonly #dirTimes: [string, Date][] = [];
  #entries = 0;
  #bytes = 0;
  #whiteouts = 0;
  #skippedNodes = 0;

  constructor(tree: ImageTree, options: ApplyLayerOptions) {
    this.#tree = tree;
    this.#options = options;
  }

  stats(): LayerStats {
    return {
      entries: this.#entries,
      bytes: this.#bytes,
      whiteouts: this.#whiteouts,
      skippedNodes: this.#skippedNodes,
    };
  }

  async apply(entry: ReadEntry): Promise<void> {
    this.#entries++;
    const components = cleanComponents(entry.path);
    const name = components.at(-1);
    if (name?.startsWith(WHITEOUT_PREFIX)) {
      entry.resume();
      await this.#whiteout(components);
      return;
    }
    if (name === undefined) {
      entry.resume();
      if (entry.type === "Directory") {
        const root = await this.#tree.root();
        try {
          await this.#setDirectoryMeta(root.handle, "/", entry);
        } finally {
          await root.close();
        }
      }
      return;
    }
    // Parents as directories; a lower layer's file in the way makes the image invalid.
    const target = (await this.#tree.entry(components.join("/"), { create: true })) as ImageEntry;
    try {
      await this.#applyAt(target, entry, components);
    } finally {
      await target.dir.close();
    }
  }

  async #applyAt(target: ImageEntry, entry: ReadEntry, components: string[]): Promise<void> {
    switch (entry.type) {
      case "Directory":
        entry.resume();
        await this.#directory(target, entry);
        break;
      case "File":
      case "OldFile":
      case "ContiguousFile":
        await this.#file(target, entry);
        break;
      case "SymbolicLink": {
        entry.resume();
        await this.#replace(target);
        await symlink(entry.linkpath ?? "", target.at);
        const mtime = entry.mtime ?? new Date(0);
        if (this.#options.preserveOwners) await lchown(target.at, entry.uid ?? 0, entry.gid ?? 0);
        await lutimes(target.at, mtime, mtime);
        break;
      }
      case "Link": {
        entry.resume();
        await this.#hardLink(target, entry, components);
        break;
      }
      case "CharacterDevice":
      case "BlockDevice":
      case "FIFO":
        entry.resume();
        this.#skippedNodes++;
        return;
      default:
        // Types the parser passes through but an image has no use for (e.g. GNU sparse).
        entry.resume();
        throw new WarrenError(
          "image_invalid",
          `layer entry /${components.join("/")} has unsupported tar type ${entry.type}`,
        );
    }
    this.#written.add(target.path);
  }

  /** Sets directories' times last, each reopened without following a link put there since. */
  async finish(): Promise<void> {
    for (const [path, mtime] of this.#dirTimes.reverse()) {
      const dir = await this.#tree.directory(path).catch(() => undefined);
      if (!dir) continue;
      try {
        // The path may have been replaced by a link to a directory elsewhere in the image.
        if (dir.path === path) await dir.handle.utimes(mtime, mtime);
      } finally {
        await dir.close();
      }
    }
  }

  async #hardLink(target: ImageEntry, entry: ReadEntry, components: string[]): Promise<void> {
    const source = await this.#tree.entry(entry.linkpath ?? "");
    try {
      const st = source ? await lstatEntry(source.at) : undefined;
      if (!source || !st || st.isDirectory()) {
        throw new WarrenError(
          "image_invalid",
          `layer hard-links /${components.join("/")} to ${entry.linkpath}, which is ${st ? "a directory" : "missing"}`,
        );
      }
      if (source.path === target.path) return;
      await this.#replace(target);
      // link(2) links a symlink itself, never what it points at.
      await link(source.at, target.at);
    } finally {
      await source?.dir.close();
    }
  }

  async #whiteout(components: string[]): Promise<void> {
    this.#whiteouts++;
    const marker = await this.#tree.entry(components.join("/"));
    if (!marker) return;
    const { dir, name } = marker;
    try {
      if (name === OPAQUE_WHITEOUT) {
        for (const child of await dir.list()) {
          if (!this.#written.has(dir.child(child))) await removeEntry(dir, child);
        }
        return;
      }
      const victim = name.slice(WHITEOUT_PREFIX.length);
      if (victim === "" || victim === "." || victim === "..") {
        throw new WarrenError("image_invalid", `layer has a whiteout of ${victim} in ${dir.path}`);
      }
      await removeEntry(dir, victim);
    } finally {
      await dir.close();
    }
  }

  /** Removes what stands at `target`, unless it is a directory a directory entry keeps. */
  async #replace(target: ImageEntry, keepDirectory = false): Promise<boolean> {
    const st = await lstatEntry(target.at);
    if (!st) return false;
    if (keepDirectory && st.isDirectory()) return true;
    await removeEntry(target.dir, target.name);
    return false;
  }

  async #directory(target: ImageEntry, entry: ReadEntry): Promise<void> {
    if (!(await this.#replace(target, true))) await mkdir(target.at, { mode: 0o700 });
    const handle = await open(target.at, OPEN_DIRECTORY);
    try {
      await this.#setDirectoryMeta(handle, target.path, entry);
    } finally {
      await handle.close();
    }
  }

  async #file(target: ImageEntry, entry: ReadEntry): Promise<void> {
    const size = entry.size ?? 0;
    if (this.#bytes + size > this.#options.maxBytes) {
      entry.resume();
      throw new WarrenError(
        "image_invalid",
        `the image unpacks to more than ${this.#options.maxBytes} bytes`,
      );
    }
    await this.#replace(target);
    // O_EXCL|O_NOFOLLOW: a fresh file, never one reached through a symlink.
    const handle = await open(target.at, OPEN_NEW, 0o600);
    try {
      for await (const chunk of entry as AsyncIterable<Buffer>) await handle.write(chunk);
      this.#bytes += size;
      await this.#setMeta(handle, entry, 0o644);
      const mtime = entry.mtime ?? new Date(0);
      await handle.utimes(mtime, mtime);
    } finally {
      await handle.close();
    }
  }

  async #setDirectoryMeta(handle: FileHandle, path: string, entry: ReadEntry): Promise<void> {
    await this.#setMeta(handle, entry, 0o755);
    this.#dirTimes.push([path, entry.mtime ?? new Date(0)]);
  }

  /** Owner (before the mode: chown clears setuid bits), then mode, through the open handle. */
  async #setMeta(handle: FileHandle, entry: ReadEntry, defaultMode: number): Promise<void> {
    if (this.#options.preserveOwners) await handle.chown(entry.uid ?? 0, entry.gid ?? 0);
    await handle.chmod((entry.mode ?? defaultMode) & 0o7777);
  }
}

/** Removes an entry of a directory and what is under it (rm never follows a symlink). */
async function removeEntry(dir: ImageDir, name: string): Promise<void> {
  await rm(dir.at(name), { recursive: true, force: true });
}
