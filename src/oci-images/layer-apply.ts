import { once } from "node:events";
import {
  chmod,
  chown,
  lchown,
  link,
  lstat,
  lutimes,
  mkdir,
  open,
  readdir,
  rm,
  symlink,
  utimes,
} from "node:fs/promises";
import { dirname, join } from "node:path";
import { Readable } from "node:stream";
import { Parser, type ReadEntry } from "tar";
import { WarrenError } from "../shared/index.js";
import { decompressor, sniffCompression } from "./layer-decompress.js";
import { cleanComponents, resolveInRoot } from "./root-path.js";

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
 * point at paths inside the root. Every path is resolved inside the root as a chroot would
 * (root-path.ts), and no write follows a symlink at its last component, so a hostile layer
 * cannot write outside the root.
 */
export async function applyLayer(
  source: Readable,
  options: ApplyLayerOptions,
): Promise<LayerStats> {
  const applier = new LayerApplier(options);
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
  readonly #options: ApplyLayerOptions;
  /** Host paths this layer wrote: an opaque whiteout keeps them. */
  readonly #written = new Set<string>();
  /** Directories' times, set once the layer is done (writing inside changes them). */
  readonly #dirTimes: [string, Date][] = [];
  #entries = 0;
  #bytes = 0;
  #whiteouts = 0;
  #skippedNodes = 0;

  constructor(options: ApplyLayerOptions) {
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
    const root = this.#options.root;
    const components = cleanComponents(entry.path);
    const name = components.at(-1);
    if (name?.startsWith(WHITEOUT_PREFIX)) {
      entry.resume();
      await this.#whiteout(components);
      return;
    }
    const target = await resolveInRoot(root, components.join("/"));
    if (target === root) {
      entry.resume();
      if (entry.type === "Directory") await this.#setMeta(root, entry, false);
      return;
    }
    await this.#ensureParent(target);
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
      case "SymbolicLink":
        entry.resume();
        await this.#replace(target);
        await symlink(entry.linkpath ?? "", target);
        await this.#setMeta(target, entry, true);
        break;
      case "Link": {
        entry.resume();
        const source = await resolveInRoot(root, entry.linkpath ?? "");
        const st = await lstat(source).catch(() => undefined);
        if (!st || st.isDirectory()) {
          throw new WarrenError(
            "image_invalid",
            `layer hard-links /${components.join("/")} to ${entry.linkpath}, which is ${st ? "a directory" : "missing"}`,
          );
        }
        if (source === target) break;
        await this.#replace(target);
        await link(source, target);
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
    this.#written.add(target);
  }

  async finish(): Promise<void> {
    for (const [path, mtime] of this.#dirTimes.reverse()) {
      await utimes(path, mtime, mtime).catch(() => {});
    }
  }

  async #whiteout(components: string[]): Promise<void> {
    this.#whiteouts++;
    const root = this.#options.root;
    const name = components.at(-1) ?? "";
    const dir = dirname(await resolveInRoot(root, components.join("/")));
    if (name === OPAQUE_WHITEOUT) {
      const children = await readdir(dir).catch(() => [] as string[]);
      for (const child of children) {
        const path = join(dir, child);
        if (!this.#written.has(path)) await rm(path, { recursive: true, force: true });
      }
      return;
    }
    const victim = join(dir, name.slice(WHITEOUT_PREFIX.length));
    // rm removes a symlink itself, never what it points at.
    if (victim !== root && dir.startsWith(root)) await rm(victim, { recursive: true, force: true });
  }

  /** Parents as directories; a lower layer's file in the way makes the image invalid. */
  async #ensureParent(target: string): Promise<void> {
    try {
      await mkdir(dirname(target), { recursive: true, mode: 0o755 });
    } catch (err) {
      throw new WarrenError(
        "image_invalid",
        `layer writes ${target.slice(this.#options.root.length)} below something that is not a directory`,
        { cause: err },
      );
    }
  }

  /** Removes what stands at `target`, unless it is a directory a directory entry keeps. */
  async #replace(target: string, keepDirectory = false): Promise<boolean> {
    const st = await lstat(target).catch(() => undefined);
    if (!st) return false;
    if (keepDirectory && st.isDirectory()) return true;
    await rm(target, { recursive: true, force: true });
    return false;
  }

  async #directory(target: string, entry: ReadEntry): Promise<void> {
    if (!(await this.#replace(target, true))) await mkdir(target, { mode: 0o700 });
    await this.#setMeta(target, entry, false);
  }

  async #file(target: string, entry: ReadEntry): Promise<void> {
    const size = entry.size ?? 0;
    if (this.#bytes + size > this.#options.maxBytes) {
      entry.resume();
      throw new WarrenError(
        "image_invalid",
        `the image unpacks to more than ${this.#options.maxBytes} bytes`,
      );
    }
    await this.#replace(target);
    // O_EXCL: a fresh file, never one reached through a symlink put there meanwhile.
    const handle = await open(target, "wx", 0o600);
    try {
      for await (const chunk of entry as AsyncIterable<Buffer>) await handle.write(chunk);
      this.#bytes += size;
      if (this.#options.preserveOwners) await handle.chown(entry.uid ?? 0, entry.gid ?? 0);
      await handle.chmod((entry.mode ?? 0o644) & 0o7777);
      const mtime = entry.mtime ?? new Date(0);
      await handle.utimes(mtime, mtime);
    } finally {
      await handle.close();
    }
  }

  /** Owner (before the mode: chown clears setuid bits), mode and time, as the archive says. */
  async #setMeta(target: string, entry: ReadEntry, isLink: boolean): Promise<void> {
    const mtime = entry.mtime ?? new Date(0);
    if (isLink) {
      if (this.#options.preserveOwners) await lchown(target, entry.uid ?? 0, entry.gid ?? 0);
      await lutimes(target, mtime, mtime);
      return;
    }
    if (this.#options.preserveOwners) await chown(target, entry.uid ?? 0, entry.gid ?? 0);
    await chmod(target, (entry.mode ?? 0o755) & 0o7777);
    this.#dirTimes.push([target, mtime]);
  }
}
