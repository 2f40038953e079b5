import { constants } from "node:fs";
import { type FileHandle, lstat, mkdir, open, readdir, readlink } from "node:fs/promises";
import { posix } from "node:path";
import { WarrenError } from "../shared/index.js";

/** Symlinks followed while resolving one path, as Linux's own limit (ELOOP beyond). */
const MAX_LINK_HOPS = 40;

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK } = constants;
/** A directory, never through a symlink at its own name. */
export const OPEN_DIRECTORY = O_RDONLY | O_DIRECTORY | O_NOFOLLOW;
/** A file to read: never through a symlink, and never blocking on a FIFO. */
export const OPEN_READ = O_RDONLY | O_NOFOLLOW | O_NONBLOCK;
/** A file that did not exist: never an existing one, never through a symlink. */
export const OPEN_NEW = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW;

/**
 * The components of an image path, cleaned as if `/` were the root: `./a//b/../c` → `a/c`,
 * `../../etc` → `etc`. A layer cannot name anything above the root this way.
 */
export function cleanComponents(path: string): string[] {
  const out: string[] = [];
  for (const part of path.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") out.pop();
    else out.push(part);
  }
  return out;
}

const isCode = (err: unknown, ...codes: string[]) =>
  codes.includes((err as NodeJS.ErrnoException).code ?? "");

/**
 * A directory of the image, held open. Entries in it are reached as
 * `/proc/self/fd/<fd>/<name>`: the kernel starts from the open directory itself (as openat
 * would; Node has no openat), so no path string is walked again and nothing a path passes
 * through can have been swapped for a symlink since it was checked.
 */
export class ImageDir {
  readonly #handle: FileHandle;
  /** The directory's path inside the image (`/`, `/etc`), for messages and bookkeeping. */
  readonly path: string;

  constructor(handle: FileHandle, path: string) {
    this.#handle = handle;
    this.path = path;
  }

  /** The host path of the entry `name` of this very directory. */
  at(name: string): string {
    if (name === "" || name === "." || name === ".." || name.includes("/")) {
      throw new WarrenError("image_invalid", `"${name}" in ${this.path} is not a file name`);
    }
    return `/proc/self/fd/${this.#handle.fd}/${name}`;
  }

  /** The path inside the image of the entry `name`. */
  child(name: string): string {
    return posix.join(this.path, name);
  }

  get handle(): FileHandle {
    return this.#handle;
  }

  /** Names in this directory (read through its descriptor, not its path). */
  list(): Promise<string[]> {
    return readdir(`/proc/self/fd/${this.#handle.fd}`);
  }

  close(): Promise<void> {
    return this.#handle.close();
  }
}

/** One path of the image: the open directory holding it and its last component. */
export interface ImageEntry {
  readonly dir: ImageDir;
  readonly name: string;
  /** The resolved path inside the image (symlinks of its directories followed in-image). */
  readonly path: string;
  /** The host path of the entry, for calls that do not follow a last-component symlink. */
  readonly at: string;
}

interface WalkOptions {
  /** Make missing directories (0755); a non-directory in the way is then `image_invalid`. */
  readonly create?: boolean;
}

/**
 * An unpacked image being assembled or edited as root: a hostile tree. Paths are resolved as
 * a chroot would (a symlink's absolute target restarts at the image's root, `..` stops
 * there), one component at a time, each directory opened with O_NOFOLLOW|O_DIRECTORY from
 * its parent's descriptor. Callers get the open parent directory and the last name, and act
 * on the entry only with calls that never follow a symlink there (O_NOFOLLOW opens, lstat,
 * rename, unlink, symlink, link, mkdir, lchown, lutimes) or through a handle so opened.
 */
export class ImageTree {
  readonly #root: ImageDir;

  private constructor(root: ImageDir) {
    this.#root = root;
  }

  static async open(root: string): Promise<ImageTree> {
    return new ImageTree(new ImageDir(await open(root, OPEN_DIRECTORY), "/"));
  }

  /** The image's root directory, opened anew (the caller closes it). */
  async root(): Promise<ImageDir> {
    // The descriptor's magic link is followed on purpose (it is the root directory itself).
    const again = await open(`/proc/self/fd/${this.#root.handle.fd}`, O_RDONLY | O_DIRECTORY);
    return new ImageDir(again, "/");
  }

  /**
   * The directory holding `path`'s last component, and that name; undefined for the root
   * itself, or (without `create`) when a directory on the way is missing or not one.
   */
  async entry(path: string, options: WalkOptions = {}): Promise<ImageEntry | undefined> {
    const components = cleanComponents(path);
    const name = components.pop();
    if (name === undefined) return undefined;
    const dir = await this.#walk(components, options);
    if (!dir) return undefined;
    return { dir, name, path: dir.child(name), at: dir.at(name) };
  }

  /** The directory at `path`, its own name resolved in-image too. */
  directory(path: string, options: WalkOptions = {}): Promise<ImageDir | undefined> {
    return this.#walk(cleanComponents(path), options);
  }

  close(): Promise<void> {
    return this.#root.close();
  }

  async #walk(components: string[], options: WalkOptions): Promise<ImageDir | undefined> {
    let pending = [...components];
    let done: string[] = [];
    let hops = 0;
    let dir = await this.root();
    try {
      while (pending.length > 0) {
        const name = pending.shift() as string;
        const at = dir.at(name);
        const next = await openChildDirectory(at, options.create === true);
        if (next) {
          await dir.close();
          done.push(name);
          dir = new ImageDir(next, `/${done.join("/")}`);
          continue;
        }
        const shown = `/${[...done, name].join("/")}`;
        const st = await lstatEntry(at);
        if (!st?.isSymbolicLink()) {
          if (options.create) {
            throw new WarrenError(
              "image_invalid",
              `the image has ${st ? "a file" : "nothing"} at ${shown}, where a directory is needed`,
            );
          }
          await dir.close();
          return undefined;
        }
        if (++hops > MAX_LINK_HOPS) {
          throw new WarrenError(
            "image_invalid",
            `too many symlinks resolving ${shown} in the image`,
          );
        }
        const target = await readlink(at);
        const base = target.startsWith("/") ? [] : done;
        pending = [...cleanComponents(posix.join("/", ...base, target)), ...pending];
        done = [];
        await dir.close();
        dir = await this.root();
      }
      return dir;
    } catch (err) {
      await dir.close().catch(() => {});
      throw err;
    }
  }
}

/** The directory at `at` (never through a symlink), made when missing and `create`. */
async function openChildDirectory(at: string, create: boolean): Promise<FileHandle | undefined> {
  try {
    return await open(at, OPEN_DIRECTORY);
  } catch (err) {
    if (isCode(err, "ENOENT") && create) {
      await mkdir(at, { mode: 0o755 }).catch((e: unknown) => {
        if (!isCode(e, "EEXIST")) throw e;
      });
      return openChildDirectory(at, false);
    }
    if (isCode(err, "ENOENT", "ENOTDIR", "ELOOP")) return undefined;
    throw err;
  }
}

/** lstat of an entry, or undefined when nothing is there. */
export async function lstatEntry(at: string) {
  return lstat(at).catch((err: unknown) => {
    if (isCode(err, "ENOENT")) return undefined;
    throw err;
  });
}

/** A regular file of the image read whole (undefined when missing or not a regular file). */
export async function readRegularFile(
  at: string,
  maxBytes: number,
): Promise<{ bytes: Buffer; mode: number } | undefined> {
  const handle = await open(at, OPEN_READ).catch((err: unknown) => {
    if (isCode(err, "ENOENT", "ELOOP", "ENXIO")) return undefined;
    throw err;
  });
  if (!handle) return undefined;
  try {
    const st = await handle.stat();
    if (!st.isFile()) return undefined;
    if (st.size > maxBytes) {
      throw new WarrenError("image_invalid", `the image's file is over ${maxBytes} bytes`);
    }
    return { bytes: await handle.readFile(), mode: st.mode };
  } finally {
    await handle.close();
  }
}
