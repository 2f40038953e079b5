import { constants, createReadStream } from "node:fs";
import type { FileHandle } from "node:fs/promises";
import { lstat, mkdir, open, readdir, readlink, rmdir, unlink } from "node:fs/promises";
import { type Readable, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { WarrenError } from "../shared/index.js";
import { DIR_FLAGS, ENTRY_FLAGS, inDir, openDirectory, WalkError } from "./by-descriptor.js";
import type { DiskReserve } from "./disk-reserve.js";
import type { GuestIds } from "./guest-ids.js";
import { ENTRY_BYTES } from "./quota.js";

/** A volume entry as E2B's `VolumeEntryStat`. */
export interface VolumeEntry {
  readonly name: string;
  /** Absolute within the volume: `/dir/file`. */
  readonly path: string;
  readonly type: "file" | "directory" | "symlink" | "unknown";
  readonly size: number;
  /** Permission bits (`0o644`), no file type. */
  readonly mode: number;
  readonly uid: number;
  readonly gid: number;
  readonly atime: Date;
  readonly mtime: Date;
  readonly ctime: Date;
  /** A symbolic link's target, as written. */
  readonly target?: string;
}

/** Owner and permissions to set; absent ones are left as they are (or the defaults). */
export interface EntryMetadata {
  readonly uid?: number;
  readonly gid?: number;
  /** Permission bits; set-uid and set-gid are never stored (see KEPT_MODE_BITS). */
  readonly mode?: number;
}

/** What a volume's writes are held to, and how its owners are kept. */
export interface VolumeLimits {
  /** Whether the volume's team may add that many bytes now (its quota); default: always. */
  readonly admit?: (bytes: number) => boolean;
  /** The volumes' filesystem's free-space floor (507 disk_pressure below it). */
  readonly disk?: DiskReserve;
  /**
   * Owners as the guests' ids shifted into a host range (WARREN_GUEST_ID_BASE): what is said
   * and set is the guest's id, what is stored the host's; what this makes is the range's
   * root's. Unset: ids as they are, new entries this process's.
   */
  readonly ids?: GuestIds;
}

const MAX_PATH_BYTES = 4096;
const MAX_NAME_BYTES = 255;
const MAX_DEPTH = 64;
/**
 * Permission bits ever stored: no set-uid or set-gid, which a sandbox mounting the volume
 * would honour for a file planted here (sticky kept: it grants nothing).
 */
const KEPT_MODE_BITS = 0o1777;

/**
 * A volume's files as the content API reaches them, as root, while guests write the same tree
 * over their mounts. A guest is hostile: any name may become a symbolic link (to `/etc`) or a
 * FIFO at any moment. So no path is ever resolved as text: each directory is opened from its
 * parent's open descriptor (`/proc/self/fd/<parent>/<name>`, which looks `name` up in that
 * very directory) with O_NOFOLLOW, and the last step acts on a name in an open directory or
 * on an open descriptor, checked to be what it was expected to be. A symbolic link on the way
 * is refused, never followed, even one that stays inside the volume.
 */
export class VolumeFiles {
  readonly #root: string;
  readonly #admit: (bytes: number) => boolean;
  readonly #disk: DiskReserve | undefined;
  readonly #ids: GuestIds | undefined;

  /** `root`: the volume's directory, made by Warren (trusted, unlike everything under it). */
  constructor(root: string, limits: VolumeLimits = {}) {
    this.#root = root;
    this.#admit = limits.admit ?? (() => true);
    this.#disk = limits.disk;
    this.#ids = limits.ids;
  }

  /** Who owns what this makes: the guest range's root (unset: this process). */
  get #owner(): { uid: number; gid: number } | undefined {
    const ids = this.#ids;
    return ids && { uid: ids.host(0), gid: ids.host(0) };
  }

  /** Metadata to store: a guest's owner as the host's; for a new entry, the default owner. */
  #stored(metadata: EntryMetadata, created: boolean): EntryMetadata {
    const ids = this.#ids;
    if (!ids) return metadata;
    const { uid, gid, mode } = checkMetadata(metadata);
    return {
      ...(mode !== undefined && { mode }),
      ...((uid !== undefined || created) && { uid: ids.host(uid ?? 0) }),
      ...((gid !== undefined || created) && { gid: ids.host(gid ?? 0) }),
    };
  }

  /** An entry as the API says it: its owner the guest's. */
  #shown(entry: VolumeEntry): VolumeEntry {
    const ids = this.#ids;
    return ids ? { ...entry, uid: ids.guest(entry.uid), gid: ids.guest(entry.gid) } : entry;
  }

  /**
   * Refuses what would take the disk below its reserve (507 disk_pressure) or the team past
   * its quota (429), else counts its bytes against the quota.
   */
  #adding(bytes: number): void {
    this.#disk?.check(bytes);
    if (!this.#admit(bytes)) {
      throw new WarrenError(
        "quota_exceeded",
        "the team is at its quota of volume bytes (maxVolumeBytes): remove files from its volumes",
      );
    }
  }

  async stat(path: string): Promise<VolumeEntry> {
    const names = parsePath(path);
    const entry =
      names.length === 0
        ? await this.#withDir([], (dir) => describeOpen(dir, "/"))
        : await this.#inParent(names, (dir, name) => describeIn(dir, name, joinPath(names)));
    return this.#shown(entry);
  }

  /** The entries under a directory, `depth` levels down (1: its children), pre-order. */
  async list(path: string, depth = 1): Promise<VolumeEntry[]> {
    if (!Number.isInteger(depth) || depth < 1 || depth > MAX_DEPTH) {
      throw new WarrenError("invalid_argument", `depth must be an integer from 1 to ${MAX_DEPTH}`);
    }
    const names = parsePath(path);
    const entries = await this.#withDir(names, (dir) => listUnder(dir, joinPath(names), depth));
    return entries.map((entry) => this.#shown(entry));
  }

  /**
   * Makes a directory. `force`: its missing parents too, and an existing directory is no
   * error (`mkdir -p`); without it the parent must exist and the name must be free.
   */
  async makeDir(path: string, options: EntryMetadata & { force?: boolean }): Promise<VolumeEntry> {
    const names = parsePath(path);
    if (names.length === 0) throw new WarrenError("conflict", "the volume's root already exists");
    const parent = names.slice(0, -1);
    const name = names.at(-1) as string;
    this.#adding(ENTRY_BYTES);
    const entry = await this.#withDir(
      parent,
      async (dir) => {
        let created = true;
        try {
          await mkdir(inDir(dir, name), { mode: 0o755 });
        } catch (err) {
          if (!(options.force && (err as NodeJS.ErrnoException).code === "EEXIST")) {
            throw fsError(err, joinPath(names));
          }
          created = false;
        }
        const made = await openEntry(dir, name, joinPath(names), "directory");
        try {
          await applyMetadata(made, this.#stored(options, created));
          // A set-gid parent hands its bit down to new directories.
          await clearSetId(made);
          return await describeOpen(made, joinPath(names));
        } finally {
          await made.close();
        }
      },
      options.force === true,
    );
    return this.#shown(entry);
  }

  /** The file's bytes; the stream owns the descriptor. */
  async read(path: string): Promise<{ readonly size: number; readonly body: Readable }> {
    const names = parsePath(path);
    if (names.length === 0) throw new WarrenError("invalid_argument", "'/' is a directory");
    return this.#inParent(names, async (dir, name) => {
      const file = await openEntry(dir, name, joinPath(names), "file");
      const { size } = await file.stat();
      return { size, body: createReadStream("", { fd: file, start: 0 }) };
    });
  }

  /**
   * Writes a file from `body`, replacing what it held. `force`: missing parent directories
   * are made. A new file is 0644, owned by root unless `uid`/`gid` say otherwise.
   */
  async write(
    path: string,
    body: Readable,
    options: EntryMetadata & { force?: boolean },
  ): Promise<VolumeEntry> {
    const names = parsePath(path);
    if (names.length === 0) throw new WarrenError("invalid_argument", "'/' is a directory");
    const shown = joinPath(names);
    this.#adding(ENTRY_BYTES);
    const entry = await this.#withDir(
      names.slice(0, -1),
      async (dir) => {
        const name = names.at(-1) as string;
        const flags = constants.O_WRONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
        let file: FileHandle;
        let created = true;
        try {
          // Made here (its owner set below) or there already (its owner kept).
          file = await open(
            inDir(dir, name),
            flags | constants.O_CREAT | constants.O_EXCL,
            0o644,
          ).catch(async (err: NodeJS.ErrnoException) => {
            if (err.code !== "EEXIST") throw err;
            created = false;
            return open(inDir(dir, name), flags);
          });
        } catch (err) {
          throw fsError(err, shown);
        }
        try {
          if (!(await file.stat()).isFile()) {
            throw new WarrenError("invalid_argument", `'${shown}' is not a regular file`);
          }
          await file.truncate(0);
          // Written through the handle itself: a write stream on its fd closes that fd when
          // the pipeline destroys it (a refused or aborted upload), and the close below then
          // closed the number again — EBADF, or another file that had reused it.
          const sink = new Writable({
            write: (chunk: Buffer, _encoding, done) => {
              try {
                this.#adding(chunk.length);
              } catch (err) {
                return done(err as Error);
              }
              writeAll(file, chunk).then(() => done(), done);
            },
          });
          await pipeline(body, sink);
          await applyMetadata(file, this.#stored(options, created));
          await clearSetId(file); // one left from before is gone once the file is rewritten
          return await describeOpen(file, shown);
        } finally {
          await file.close();
        }
      },
      options.force === true,
    );
    return this.#shown(entry);
  }

  /** Removes a file, a link or a whole directory tree. */
  async remove(path: string): Promise<void> {
    const names = parsePath(path);
    if (names.length === 0)
      throw new WarrenError("invalid_argument", "the volume's root cannot be removed");
    await this.#inParent(names, (dir, name) => removeIn(dir, name, joinPath(names)));
  }

  /** Sets owner and permissions (a link: its owner only). */
  async setMetadata(path: string, wanted: EntryMetadata): Promise<VolumeEntry> {
    const names = parsePath(path);
    const shown = joinPath(names);
    const metadata = this.#stored(wanted, false);
    if (names.length === 0) {
      return this.#shown(
        await this.#withDir([], async (dir) => {
          await applyMetadata(dir, metadata);
          return describeOpen(dir, shown);
        }),
      );
    }
    const entry = await this.#inParent(names, async (dir, name) => {
      const kind = typeOf(await lstatIn(dir, name, shown));
      if (kind === "symlink" || kind === "unknown") {
        throw new WarrenError("invalid_argument", `'${shown}' is not a file or a directory`);
      }
      const opened = await openEntry(dir, name, shown, kind);
      try {
        await applyMetadata(opened, metadata);
        return await describeOpen(opened, shown);
      } finally {
        await opened.close();
      }
    });
    return this.#shown(entry);
  }

  /** Runs `work` on the open parent directory of the last name. */
  #inParent<T>(names: readonly string[], work: (dir: FileHandle, name: string) => Promise<T>) {
    return this.#withDir(names.slice(0, -1), (dir) => work(dir, names.at(-1) as string));
  }

  /** Opens the directory `names` leads to, step by step; `create`: making missing ones. */
  async #withDir<T>(
    names: readonly string[],
    work: (dir: FileHandle) => Promise<T>,
    create = false,
  ): Promise<T> {
    const dir = await openDirectory(this.#root, names, create, this.#owner).catch(
      (err: unknown) => {
        if (!(err instanceof WalkError)) throw err;
        throw fsError(err.cause, joinPath(names.slice(0, err.at + 1)));
      },
    );
    try {
      return await work(dir);
    } finally {
      await dir.close();
    }
  }
}

/**
 * A volume path's names: absolute or relative to the root, `.` and empty names dropped;
 * `..`, NUL and oversized names refused (a path can only go down).
 */
export function parsePath(path: string): string[] {
  if (typeof path !== "string" || path.includes("\0")) {
    throw new WarrenError("invalid_argument", "path must be a string without NUL bytes");
  }
  if (Buffer.byteLength(path) > MAX_PATH_BYTES) {
    throw new WarrenError("invalid_argument", `path is longer than ${MAX_PATH_BYTES} bytes`);
  }
  const names = path.split("/").filter((name) => name !== "" && name !== ".");
  for (const name of names) {
    if (name === "..") throw new WarrenError("invalid_argument", "path must not contain '..'");
    if (Buffer.byteLength(name) > MAX_NAME_BYTES) {
      throw new WarrenError(
        "invalid_argument",
        `a name in the path is longer than ${MAX_NAME_BYTES} bytes`,
      );
    }
  }
  return names;
}

function joinPath(names: readonly string[]): string {
  return `/${names.join("/")}`;
}

/** Opens `name` in `dir` without following a link, and checks it is a `kind`. */
async function openEntry(
  dir: FileHandle,
  name: string,
  shown: string,
  kind: "file" | "directory",
): Promise<FileHandle> {
  const entry = await open(inDir(dir, name), kind === "directory" ? DIR_FLAGS : ENTRY_FLAGS).catch(
    (err: unknown) => {
      throw fsError(err, shown);
    },
  );
  const stats = await entry.stat();
  if (kind === "file" ? stats.isFile() : stats.isDirectory()) return entry;
  await entry.close();
  throw new WarrenError(
    "invalid_argument",
    `'${shown}' is ${stats.isDirectory() ? "a directory" : "not a regular file"}`,
  );
}

async function lstatIn(dir: FileHandle, name: string, shown: string) {
  return lstat(inDir(dir, name)).catch((err: unknown) => {
    throw fsError(err, shown);
  });
}

async function applyMetadata(entry: FileHandle, metadata: EntryMetadata): Promise<void> {
  const { uid, gid, mode } = checkMetadata(metadata);
  if (uid !== undefined || gid !== undefined) await entry.chown(uid ?? -1, gid ?? -1);
  if (mode !== undefined) await entry.chmod(mode & KEPT_MODE_BITS);
}

/** Clears the set-uid and set-gid bits of an open entry, if it has any. */
async function clearSetId(entry: FileHandle): Promise<void> {
  const { mode } = await entry.stat();
  if ((mode & 0o6000) !== 0) await entry.chmod(mode & KEPT_MODE_BITS);
}

function checkMetadata(metadata: EntryMetadata): EntryMetadata {
  for (const key of ["uid", "gid"] as const) {
    const value = metadata[key];
    if (value !== undefined && (!Number.isInteger(value) || value < 0 || value > 0xfffffffe)) {
      throw new WarrenError("invalid_argument", `${key} must be an integer from 0 to 4294967294`);
    }
  }
  const { mode } = metadata;
  if (mode !== undefined && (!Number.isInteger(mode) || mode < 0 || mode > 0o7777)) {
    throw new WarrenError("invalid_argument", "mode must be permission bits from 0 to 0o7777");
  }
  return metadata;
}

type Stats = Awaited<ReturnType<typeof lstat>>;

function typeOf(stats: Stats): VolumeEntry["type"] {
  if (stats.isFile()) return "file";
  if (stats.isDirectory()) return "directory";
  if (stats.isSymbolicLink()) return "symlink";
  return "unknown";
}

function entryOf(stats: Stats, path: string, target?: string): VolumeEntry {
  const name = path === "/" ? "/" : (path.split("/").at(-1) as string);
  return {
    name,
    path,
    type: typeOf(stats),
    size: Number(stats.size),
    mode: Number(stats.mode) & 0o7777,
    uid: Number(stats.uid),
    gid: Number(stats.gid),
    atime: stats.atime,
    mtime: stats.mtime,
    ctime: stats.ctime,
    ...(target !== undefined && { target }),
  };
}

async function describeOpen(entry: FileHandle, path: string): Promise<VolumeEntry> {
  return entryOf(await entry.stat(), path);
}

async function describeIn(dir: FileHandle, name: string, path: string): Promise<VolumeEntry> {
  const stats = await lstatIn(dir, name, path);
  if (!stats.isSymbolicLink()) return entryOf(stats, path);
  const target = await readlink(inDir(dir, name)).catch(() => undefined);
  return entryOf(stats, path, target);
}

async function listUnder(dir: FileHandle, path: string, depth: number): Promise<VolumeEntry[]> {
  const names = (await readdir(`/proc/self/fd/${dir.fd}`)).sort();
  const entries: VolumeEntry[] = [];
  for (const name of names) {
    const childPath = path === "/" ? `/${name}` : `${path}/${name}`;
    let entry: VolumeEntry;
    try {
      entry = await describeIn(dir, name, childPath);
    } catch {
      continue; // removed while listed
    }
    entries.push(entry);
    if (depth > 1 && entry.type === "directory") {
      const child = await open(inDir(dir, name), DIR_FLAGS).catch(() => undefined);
      if (!child) continue; // replaced by a link or removed meanwhile: not followed
      try {
        entries.push(...(await listUnder(child, childPath, depth - 1)));
      } finally {
        await child.close();
      }
    }
  }
  return entries;
}

/** Removes `name` from `dir`: a directory with everything in it, descending by descriptor. */
async function removeIn(dir: FileHandle, name: string, shown: string, level = 0): Promise<void> {
  const stats = await lstatIn(dir, name, shown);
  if (!stats.isDirectory()) {
    await unlink(inDir(dir, name)).catch((err: unknown) => {
      throw fsError(err, shown);
    });
    return;
  }
  if (level > 4096) throw new WarrenError("invalid_argument", `'${shown}' is nested too deep`);
  const child = await open(inDir(dir, name), DIR_FLAGS).catch((err: unknown) => {
    throw fsError(err, shown);
  });
  try {
    for (const entry of await readdir(`/proc/self/fd/${child.fd}`)) {
      await removeIn(child, entry, `${shown}/${entry}`, level + 1).catch((err: unknown) => {
        if (!(err instanceof WarrenError && err.reason === "not_found")) throw err;
      });
    }
  } finally {
    await child.close();
  }
  await rmdir(inDir(dir, name)).catch((err: unknown) => {
    throw fsError(err, shown);
  });
}

/** A filesystem failure as the API's error, naming the volume path (never the host's). */
function fsError(err: unknown, shown: string): WarrenError {
  if (err instanceof WarrenError) return err;
  switch ((err as NodeJS.ErrnoException).code) {
    case "ENOENT":
      return new WarrenError("not_found", `path '${shown}' not found in the volume`);
    case "ENOTDIR":
      return new WarrenError("invalid_argument", `a part of '${shown}' is not a directory`);
    case "ELOOP":
      return new WarrenError(
        "invalid_argument",
        `'${shown}' is or crosses a symbolic link: the content API does not follow links`,
      );
    case "EEXIST":
      return new WarrenError("conflict", `'${shown}' already exists`);
    case "EISDIR":
      return new WarrenError("invalid_argument", `'${shown}' is a directory`);
    case "ENOTEMPTY":
      return new WarrenError("conflict", `'${shown}' is not empty`);
    case "ENXIO":
      return new WarrenError("invalid_argument", `'${shown}' is not a regular file`);
    case "ENOSPC":
    case "EDQUOT":
      return new WarrenError("insufficient_storage", `no space left for '${shown}'`);
    case "ENAMETOOLONG":
      return new WarrenError("invalid_argument", `'${shown}' is too long`);
    default:
      return new WarrenError("internal", `'${shown}': ${(err as Error).message}`, { cause: err });
  }
}

/** All of `chunk` at the handle's position (a write may take less than it was given). */
async function writeAll(file: FileHandle, chunk: Buffer): Promise<void> {
  for (let at = 0; at < chunk.length; ) {
    const { bytesWritten } = await file.write(chunk, at, chunk.length - at);
    at += bytesWritten;
  }
}
