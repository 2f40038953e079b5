import { randomBytes } from "node:crypto";
import { type BigIntStats, constants } from "node:fs";
import {
  type FileHandle,
  lchown,
  link,
  lstat,
  lutimes,
  mkdir,
  open,
  readdir,
  readlink,
  rename,
  rmdir,
  statfs,
  symlink,
  unlink,
} from "node:fs/promises";
import { DIR_FLAGS, ENTRY_FLAGS, inDir, openDirectory, WalkError } from "../by-descriptor.js";
import type { DiskReserve } from "../disk-reserve.js";
import { ENTRY_BYTES } from "../quota.js";
import { HANDLE_BYTES, type Handles } from "./handles.js";
import { type Listing, Listings } from "./listings.js";
import {
  AcceptStat,
  type Credentials,
  NOBODY_ID,
  type ProgramReply,
  type RpcProgram,
} from "./rpc.js";
import { type NfsWork, newWork } from "./work.js";
import { type XdrReader, XdrWriter } from "./xdr.js";

/**
 * NFSv3 (RFC 1813) and its MOUNT protocol for one volume's directory, every call carried out
 * by descriptor (by-descriptor.ts): what a guest names is looked up in open directories with
 * O_NOFOLLOW, so its links are never followed here (its own kernel follows them, inside the
 * guest). Writes are synchronous (FILE_SYNC). Files a caller makes are its own (AUTH_UNIX
 * uid and gid: the guest's `user` writes files owned by 1000). No permission is checked: every
 * sandbox mounting the volume is root in its guest, which could do anything there anyway.
 * MKNOD is not supported (no device, FIFO or socket is ever made on the host).
 *
 * What one sandbox's root leaves in a volume must not give root in another sandbox mounting
 * it: uid and gid 0 are squashed to the anonymous id (65534) for whatever is made and for
 * SETATTR (rpc.ts: the caller; here: a chown to 0), set-uid and set-gid bits are never
 * stored (SETATTR, CREATE, MKDIR, and a directory's inherited set-gid) and never shown
 * (attributes leave them out, so even a file planted on the host runs as its caller).
 */

export const NFS_PROGRAM = 100003;
export const MOUNT_PROGRAM = 100005;
/** Largest READ and WRITE (the RPC record bound leaves room for the headers). */
export const MAX_IO_BYTES = 1024 * 1024;
/** Permission bits ever stored or shown: set-uid and set-gid left out, sticky kept. */
const KEPT_MODE_BITS = 0o1777;
/** Byte offsets past this are not exact as numbers: FBIG. */
const MAX_OFFSET = BigInt(Number.MAX_SAFE_INTEGER);
const MAX_NAME_BYTES = 255;
const MAX_PATH_BYTES = 4096;

const Status = {
  OK: 0,
  PERM: 1,
  NOENT: 2,
  IO: 5,
  ACCES: 13,
  EXIST: 17,
  XDEV: 18,
  NOTDIR: 20,
  ISDIR: 21,
  INVAL: 22,
  FBIG: 27,
  NOSPC: 28,
  MLINK: 31,
  NAMETOOLONG: 63,
  NOTEMPTY: 66,
  DQUOT: 69,
  STALE: 70,
  BADHANDLE: 10001,
  NOTSUPP: 10004,
  TOOSMALL: 10005,
  SERVERFAULT: 10006,
  BADTYPE: 10007,
} as const;

class NfsError extends Error {
  constructor(readonly status: number) {
    super(`nfs status ${status}`);
  }
}

const FileType = { REG: 1, DIR: 2, BLK: 3, CHR: 4, LNK: 5, SOCK: 6, FIFO: 7 } as const;

/** What one SETATTR/CREATE/MKDIR asks to set. */
interface SetAttributes {
  mode?: number;
  uid?: number;
  gid?: number;
  size?: bigint;
  atime?: "server" | Date;
  mtime?: "server" | Date;
}

const ok = (body: XdrWriter): ProgramReply => ({ stat: AcceptStat.SUCCESS, body });

export interface Nfs3Options {
  /** Whether the volumes' team may add that many bytes (its quota); DQUOT if not. */
  readonly admit?: ((bytes: number) => boolean) | undefined;
  /** The volumes' filesystem's free-space floor; NOSPC below it. */
  readonly disk?: DiskReserve | undefined;
  readonly work?: NfsWork | undefined;
}

/** Entries of a READDIR page stat'ed at once (each one a libuv thread's call). */
const STAT_BATCH = 16;

export class Nfs3Program implements RpcProgram {
  readonly program = NFS_PROGRAM;
  readonly version = 3;
  readonly #volumes: readonly Handles[];
  /** Changes when the server starts: a client resends writes it had not seen committed. */
  readonly #writeVerifier = randomBytes(8);
  readonly #admit: (bytes: number) => boolean;
  readonly #disk: DiskReserve | undefined;
  readonly #work: NfsWork;
  readonly #listings = new Listings();

  constructor(volumes: readonly Handles[], options: Nfs3Options = {}) {
    this.#volumes = volumes;
    this.#admit = options.admit ?? (() => true);
    this.#disk = options.disk;
    this.#work = options.work ?? newWork();
  }

  /**
   * Refuses a call that would take the disk below its reserve (NOSPC) or the team past its
   * quota (DQUOT), else counts its bytes against the quota.
   */
  #adding(bytes: number): void {
    if (this.#disk && !this.#disk.admits(bytes)) throw new NfsError(Status.NOSPC);
    if (!this.#admit(bytes)) throw new NfsError(Status.DQUOT);
  }

  async call(procedure: number, args: XdrReader, credentials: Credentials): Promise<ProgramReply> {
    const handler = this.#procedures[procedure];
    if (!handler) return { stat: AcceptStat.PROC_UNAVAIL };
    const body = new XdrWriter();
    try {
      await handler(args, body, credentials);
      return ok(body);
    } catch (err) {
      if (!(err instanceof NfsError)) throw err;
      // Every result that fails is its status then, for most, empty optional attributes;
      // the failure bodies below are what RFC 1813 asks for each.
      return ok(this.#failure(procedure, err.status));
    }
  }

  readonly #procedures: Record<
    number,
    (args: XdrReader, out: XdrWriter, credentials: Credentials) => Promise<void>
  > = {
    0: async () => {},
    1: (args, out) => this.#getattr(args, out),
    2: (args, out) => this.#setattr(args, out),
    3: (args, out) => this.#lookup(args, out),
    4: (args, out) => this.#access(args, out),
    5: (args, out) => this.#readlink(args, out),
    6: (args, out) => this.#read(args, out),
    7: (args, out) => this.#write(args, out),
    8: (args, out, who) => this.#create(args, out, who),
    9: (args, out, who) => this.#mkdir(args, out, who),
    10: (args, out, who) => this.#symlink(args, out, who),
    11: async () => {
      throw new NfsError(Status.NOTSUPP);
    },
    12: (args, out) => this.#remove(args, out, false),
    13: (args, out) => this.#remove(args, out, true),
    14: (args, out) => this.#rename(args, out),
    15: (args, out) => this.#link(args, out),
    16: (args, out) => this.#readdir(args, out, false),
    17: (args, out) => this.#readdir(args, out, true),
    18: (args, out) => this.#fsstat(args, out),
    19: (args, out) => this.#fsinfo(args, out),
    20: (args, out) => this.#pathconf(args, out),
    21: (args, out) => this.#commit(args, out),
  };

  /** A failed result: the status, then the empty attributes the procedure's result has. */
  #failure(procedure: number, status: number): XdrWriter {
    const out = new XdrWriter().u32(status);
    switch (procedure) {
      case 1: // GETATTR: nothing
        return out;
      case 14: // RENAME: two wcc_data
        return emptyWcc(emptyWcc(out));
      case 15: // LINK: post_op_attr, wcc_data
        return emptyWcc(out.bool(false));
      case 2:
      case 7:
      case 8:
      case 9:
      case 10:
      case 11:
      case 12:
      case 13:
      case 21:
        return emptyWcc(out);
      case 16:
      case 17:
        return out.bool(false);
      default:
        return out.bool(false); // post_op_attr
    }
  }

  // --- procedures ------------------------------------------------------------------------

  async #getattr(args: XdrReader, out: XdrWriter) {
    const target = await this.#resolve(args);
    writeAttributes(out.u32(Status.OK), await this.#statOf(target));
  }

  async #setattr(args: XdrReader, out: XdrWriter) {
    const target = await this.#resolve(args);
    const wanted = readSetAttributes(args);
    if (args.bool()) args.fixed(8); // guard: ctime check, not kept
    await this.#apply(target, wanted);
    out.u32(Status.OK);
    writeWcc(out, await this.#statOf(target));
  }

  async #lookup(args: XdrReader, out: XdrWriter) {
    const dir = await this.#resolve(args);
    const name = readName(args);
    const stats = await this.#inDirectory(dir, async (handle) => {
      if (name === ".") return handle.stat({ bigint: true });
      if (name === "..") throw new NfsError(Status.NOTSUPP);
      return lstat(inDir(handle, name), { bigint: true });
    });
    dir.volume.seen(stats.ino, dir.ino, name);
    out.u32(Status.OK).opaque(dir.volume.handleOf(stats.ino));
    writeAttributes(out.bool(true), stats);
    writeAttributes(out.bool(true), await this.#statOf(dir));
  }

  async #access(args: XdrReader, out: XdrWriter) {
    const target = await this.#resolve(args);
    const asked = args.u32();
    writeAttributes(out.u32(Status.OK).bool(true), await this.#statOf(target));
    out.u32(asked);
  }

  async #readlink(args: XdrReader, out: XdrWriter) {
    const target = await this.#resolve(args);
    if (target.names.length === 0) throw new NfsError(Status.INVAL);
    const text = await this.#inParent(target, (dir, name) => readlink(inDir(dir, name)));
    writeAttributes(out.u32(Status.OK).bool(true), await this.#statOf(target));
    out.string(text);
  }

  async #read(args: XdrReader, out: XdrWriter) {
    const target = await this.#resolve(args);
    const offset = args.u64();
    const count = Math.min(args.u32(), MAX_IO_BYTES);
    const { bytes, stats } = await this.#withFile(target, constants.O_RDONLY, async (file) => {
      const stats = await file.stat({ bigint: true });
      // No more memory than the file has bytes there: a 1 MiB READ of a small file is small.
      const wanted = offset >= stats.size ? 0 : Number(bigMin(BigInt(count), stats.size - offset));
      if (wanted === 0) return { bytes: Buffer.alloc(0), stats };
      const buffer = Buffer.allocUnsafe(wanted);
      const { bytesRead } = await file.read(buffer, 0, wanted, Number(offset));
      return { bytes: buffer.subarray(0, bytesRead), stats };
    });
    writeAttributes(out.u32(Status.OK).bool(true), stats);
    out
      .u32(bytes.length)
      .bool(offset + BigInt(bytes.length) >= stats.size)
      .opaque(bytes);
  }

  async #write(args: XdrReader, out: XdrWriter) {
    const target = await this.#resolve(args);
    const offset = args.u64();
    args.u32(); // count: the data's own length is what is written
    args.u32(); // stable_how: every write is FILE_SYNC here
    const data = args.opaque(MAX_IO_BYTES);
    if (offset + BigInt(data.length) > MAX_OFFSET) throw new NfsError(Status.FBIG);
    this.#adding(data.length);
    const stats = await this.#withFile(target, constants.O_WRONLY, async (file) => {
      let written = 0;
      while (written < data.length) {
        const { bytesWritten } = await file.write(
          data,
          written,
          data.length - written,
          Number(offset) + written,
        );
        written += bytesWritten;
      }
      await file.datasync();
      return file.stat({ bigint: true });
    });
    writeWcc(out.u32(Status.OK), stats);
    out.u32(data.length).u32(2).fixed(this.#writeVerifier);
  }

  async #create(args: XdrReader, out: XdrWriter, who: Credentials) {
    const dir = await this.#resolve(args);
    this.#adding(ENTRY_BYTES);
    const name = readName(args);
    const how = args.u32(); // UNCHECKED 0, GUARDED 1, EXCLUSIVE 2 (a verifier, no attributes)
    let wanted: SetAttributes = {};
    let verifier: { atime: Date; mtime: Date } | undefined;
    if (how === 2) verifier = verifierTimes(args.fixed(8));
    else wanted = readSetAttributes(args);
    const stats = await this.#inDirectory(dir, async (handle) => {
      const access = constants.O_WRONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
      const path = inDir(handle, name);
      let created = true;
      const file = await open(path, access | constants.O_CREAT | constants.O_EXCL, 0o644).catch(
        async (err: NodeJS.ErrnoException) => {
          if (err.code !== "EEXIST") throw err;
          // UNCHECKED opens what is there; EXCLUSIVE does when it is its own retransmission
          // (the verifier is in the file's times, RFC 1813's way); GUARDED never.
          const existing = how === 0 || (how === 2 && (await hasTimes(path, verifier)));
          if (!existing) throw err;
          created = false;
          return open(path, access);
        },
      );
      try {
        const opened = await file.stat({ bigint: true });
        if (!opened.isFile()) throw new NfsError(Status.EXIST);
        if (created) await file.chown(who.uid, who.gid);
        await setOnOpen(file, { ...(created && { mode: 0o644 }), ...wanted, ...verifier });
        return await withoutSetId(file);
      } finally {
        await file.close();
      }
    });
    await this.#made(out, dir, name, stats);
  }

  async #mkdir(args: XdrReader, out: XdrWriter, who: Credentials) {
    const dir = await this.#resolve(args);
    this.#adding(ENTRY_BYTES);
    const name = readName(args);
    const wanted = readSetAttributes(args);
    const stats = await this.#inDirectory(dir, async (handle) => {
      await mkdir(inDir(handle, name), { mode: wanted.mode ?? 0o755 });
      const made = await open(inDir(handle, name), DIR_FLAGS);
      try {
        await made.chown(who.uid, who.gid).catch(() => {});
        await setOnOpen(made, wanted);
        // A set-gid parent (planted on the host) hands its bit down to new directories.
        return await withoutSetId(made);
      } finally {
        await made.close();
      }
    });
    await this.#made(out, dir, name, stats);
  }

  async #symlink(args: XdrReader, out: XdrWriter, who: Credentials) {
    const dir = await this.#resolve(args);
    this.#adding(ENTRY_BYTES);
    const name = readName(args);
    readSetAttributes(args); // a link's mode means nothing on Linux
    const target = args.string(MAX_PATH_BYTES);
    const stats = await this.#inDirectory(dir, async (handle) => {
      // The text is stored, never followed here: the guest's kernel resolves it, in the guest.
      await symlink(target, inDir(handle, name));
      await lchown(inDir(handle, name), who.uid, who.gid).catch(() => {});
      return lstat(inDir(handle, name), { bigint: true });
    });
    await this.#made(out, dir, name, stats);
  }

  async #remove(args: XdrReader, out: XdrWriter, directory: boolean) {
    const dir = await this.#resolve(args);
    const name = readName(args);
    await this.#inDirectory(dir, async (handle) => {
      const stats = await lstat(inDir(handle, name), { bigint: true });
      if (directory) await rmdir(inDir(handle, name));
      else if (stats.isDirectory()) throw new NfsError(Status.ISDIR);
      else await unlink(inDir(handle, name));
      if (stats.nlink <= 1n || directory) dir.volume.forget(stats.ino);
    });
    writeWcc(out.u32(Status.OK), await this.#statOf(dir));
  }

  async #rename(args: XdrReader, out: XdrWriter) {
    const from = await this.#resolve(args);
    const fromName = readName(args);
    const to = await this.#resolve(args);
    const toName = readName(args);
    if (to.volume !== from.volume) throw new NfsError(Status.XDEV);
    await this.#inDirectory(from, (fromDir) =>
      this.#inDirectory(to, async (toDir) => {
        const moved = await lstat(inDir(fromDir, fromName), { bigint: true });
        await rename(inDir(fromDir, fromName), inDir(toDir, toName));
        to.volume.seen(moved.ino, to.ino, toName);
      }),
    );
    out.u32(Status.OK);
    writeWcc(out, await this.#statOf(from));
    writeWcc(out, await this.#statOf(to));
  }

  async #link(args: XdrReader, out: XdrWriter) {
    const file = await this.#resolve(args);
    const dir = await this.#resolve(args);
    this.#adding(ENTRY_BYTES);
    const name = readName(args);
    if (file.names.length === 0) throw new NfsError(Status.ISDIR);
    if (file.volume !== dir.volume) throw new NfsError(Status.XDEV);
    await this.#inParent(file, (fromDir, fromName) =>
      this.#inDirectory(dir, (toDir) => link(inDir(fromDir, fromName), inDir(toDir, name))),
    );
    writeAttributes(out.u32(Status.OK).bool(true), await this.#statOf(file));
    writeWcc(out, await this.#statOf(dir));
  }

  async #readdir(args: XdrReader, out: XdrWriter, plus: boolean) {
    const dir = await this.#resolve(args);
    const cookie = args.u64();
    const verifier = args.fixed(8);
    // READDIRPLUS: dircount, then maxcount (the reply's bound); READDIR: count.
    if (plus) args.u32();
    const budget = args.u32();
    const { listing, stats, entries } = await this.#inDirectory(dir, async (handle) => {
      const key = dir.volume.key;
      const kept = cookie === 0n ? undefined : this.#listings.resume(key, dir.ino, verifier);
      const listing = kept ?? this.#listings.start(key, dir.ino, await this.#readNames(handle));
      const start = cookie > BigInt(listing.names.length) ? listing.names.length : Number(cookie);
      const page = pageOf(listing, start, budget, plus);
      if (page.length === 0 && start < listing.names.length) throw new NfsError(Status.TOOSMALL);
      // Only this page's entries are stat'ed, a few at a time.
      const entries: { index: number; stats: BigIntStats | undefined }[] = [];
      for (let i = 0; i < page.length; i += STAT_BATCH) {
        const batch = page.slice(i, i + STAT_BATCH);
        this.#work.entriesStatted += batch.length;
        const found = await Promise.all(
          batch.map((index) =>
            lstat(inDir(handle, listing.names[index] as string), { bigint: true }).catch(
              () => undefined, // gone since listed
            ),
          ),
        );
        for (const [j, index] of batch.entries()) entries.push({ index, stats: found[j] });
      }
      return { listing, stats: await handle.stat({ bigint: true }), entries };
    });
    writeAttributes(out.u32(Status.OK).bool(true), stats);
    out.fixed(listing.verifier);
    for (const { index, stats: entry } of entries) {
      if (!entry) continue;
      const name = listing.names[index] as string;
      dir.volume.seen(entry.ino, dir.ino, name);
      out
        .bool(true)
        .u64(entry.ino)
        .string(name)
        .u64(index + 1);
      if (plus) {
        writeAttributes(out.bool(true), entry);
        out.bool(true).opaque(dir.volume.handleOf(entry.ino));
      }
    }
    const last = entries.at(-1)?.index ?? Number(cookie) - 1;
    out.bool(false).bool(last + 1 >= listing.names.length);
  }

  /** A directory's names, read once for a whole listing. */
  async #readNames(dir: FileHandle): Promise<string[]> {
    this.#work.directoryReads++;
    return readdir(`/proc/self/fd/${dir.fd}`);
  }

  async #fsstat(args: XdrReader, out: XdrWriter) {
    const target = await this.#resolve(args);
    const fs = await statfs(target.volume.root, { bigint: true });
    // What the guest is told is free is what it may write: the disk above its reserve.
    const above = this.#disk && BigInt(this.#disk.available());
    writeAttributes(out.u32(Status.OK).bool(true), await this.#statOf(target));
    out
      .u64(fs.blocks * fs.bsize)
      .u64(above ?? fs.bfree * fs.bsize)
      .u64(above ?? fs.bavail * fs.bsize)
      .u64(fs.files)
      .u64(fs.ffree)
      .u64(fs.ffree)
      .u32(0);
  }

  async #fsinfo(args: XdrReader, out: XdrWriter) {
    const target = await this.#resolve(args);
    writeAttributes(out.u32(Status.OK).bool(true), await this.#statOf(target));
    out
      .u32(MAX_IO_BYTES) // rtmax
      .u32(MAX_IO_BYTES) // rtpref
      .u32(4096) // rtmult
      .u32(MAX_IO_BYTES) // wtmax
      .u32(MAX_IO_BYTES) // wtpref
      .u32(4096) // wtmult
      .u32(64 * 1024) // dtpref
      .u64(0x7fffffffffffffffn) // maxfilesize
      .u32(0)
      .u32(1) // time_delta: 1 ns
      .u32(0x1 | 0x2 | 0x8 | 0x10); // LINK | SYMLINK | HOMOGENEOUS | CANSETTIME
  }

  async #pathconf(args: XdrReader, out: XdrWriter) {
    const target = await this.#resolve(args);
    writeAttributes(out.u32(Status.OK).bool(true), await this.#statOf(target));
    out.u32(65000).u32(MAX_NAME_BYTES).bool(true).bool(true).bool(false).bool(true);
  }

  async #commit(args: XdrReader, out: XdrWriter) {
    const target = await this.#resolve(args);
    writeWcc(out.u32(Status.OK), await this.#statOf(target));
    out.fixed(this.#writeVerifier);
  }

  // --- reaching what a handle names ---------------------------------------------------------

  /** The object a handle (read from `args`) names: its inode and names from the root. */
  async #resolve(args: XdrReader): Promise<Target> {
    const handle = args.opaque(64);
    for (const volume of this.#volumes) {
      const ino = volume.inoOf(handle);
      if (ino === undefined) continue;
      const names = await volume.namesOf(ino);
      if (!names) throw new NfsError(Status.STALE);
      return { volume, ino, names };
    }
    throw new NfsError(Status.BADHANDLE);
  }

  async #statOf(target: Target): Promise<BigIntStats> {
    const stats =
      target.names.length === 0
        ? await this.#withDirectory(target.volume, [], (dir) => dir.stat({ bigint: true }))
        : await this.#inParent(target, (dir, name) => lstat(inDir(dir, name), { bigint: true }));
    if (stats.ino !== target.ino) {
      target.volume.forget(target.ino);
      throw new NfsError(Status.STALE);
    }
    return stats;
  }

  /** Runs `work` in the directory a target is, checked to be that directory. */
  async #inDirectory<T>(target: Target, work: (dir: FileHandle) => Promise<T>): Promise<T> {
    return this.#withDirectory(target.volume, target.names, async (dir) => {
      if ((await dir.stat({ bigint: true })).ino !== target.ino) throw new NfsError(Status.STALE);
      return work(dir);
    });
  }

  #inParent<T>(target: Target, work: (dir: FileHandle, name: string) => Promise<T>): Promise<T> {
    return this.#withDirectory(target.volume, target.names.slice(0, -1), (dir) =>
      work(dir, target.names.at(-1) as string),
    );
  }

  async #withDirectory<T>(
    volume: Handles,
    names: readonly string[],
    work: (dir: FileHandle) => Promise<T>,
  ) {
    let dir: FileHandle;
    try {
      dir = await openDirectory(volume.root, names);
    } catch (err) {
      throw err instanceof WalkError ? toNfsError(err.cause) : err;
    }
    try {
      return await work(dir);
    } catch (err) {
      throw toNfsError(err);
    } finally {
      await dir.close();
    }
  }

  /** Opens the regular file a target names, checked to be that file. */
  async #withFile<T>(target: Target, access: number, work: (file: FileHandle) => Promise<T>) {
    if (target.names.length === 0) throw new NfsError(Status.ISDIR);
    return this.#inParent(target, async (dir, name) => {
      const file = await open(
        inDir(dir, name),
        access | constants.O_NOFOLLOW | constants.O_NONBLOCK,
      );
      try {
        const stats = await file.stat({ bigint: true });
        if (stats.ino !== target.ino) throw new NfsError(Status.STALE);
        if (stats.isDirectory()) throw new NfsError(Status.ISDIR);
        if (!stats.isFile()) throw new NfsError(Status.INVAL);
        return await work(file);
      } finally {
        await file.close();
      }
    });
  }

  async #apply(target: Target, wanted: SetAttributes): Promise<void> {
    if (target.names.length === 0) {
      return this.#withDirectory(target.volume, [], (dir) => setOnOpen(dir, wanted));
    }
    await this.#inParent(target, async (dir, name) => {
      const stats = await lstat(inDir(dir, name), { bigint: true });
      if (stats.ino !== target.ino) throw new NfsError(Status.STALE);
      if (stats.isSymbolicLink()) {
        // A link: its owner and times only, never what it points to.
        if (wanted.uid !== undefined || wanted.gid !== undefined) {
          await lchown(inDir(dir, name), wanted.uid ?? -1, wanted.gid ?? -1);
        }
        if (wanted.atime || wanted.mtime) {
          await lutimes(
            inDir(dir, name),
            timeOf(wanted.atime, stats.atimeMs),
            timeOf(wanted.mtime, stats.mtimeMs),
          );
        }
        return;
      }
      if (!stats.isFile() && !stats.isDirectory()) throw new NfsError(Status.INVAL);
      const entry = await open(
        inDir(dir, name),
        stats.isDirectory()
          ? DIR_FLAGS
          : ENTRY_FLAGS | (wanted.size === undefined ? 0 : constants.O_WRONLY),
      );
      try {
        if ((await entry.stat({ bigint: true })).ino !== target.ino)
          throw new NfsError(Status.STALE);
        await setOnOpen(entry, wanted);
      } finally {
        await entry.close();
      }
    });
  }

  /** A CREATE/MKDIR/SYMLINK result: the new handle and attributes, the directory's. */
  async #made(out: XdrWriter, dir: Target, name: string, stats: BigIntStats) {
    dir.volume.seen(stats.ino, dir.ino, name);
    out.u32(Status.OK).bool(true).opaque(dir.volume.handleOf(stats.ino));
    writeAttributes(out.bool(true), stats);
    writeWcc(out, await this.#statOf(dir));
  }
}

interface Target {
  readonly volume: Handles;
  readonly ino: bigint;
  readonly names: readonly string[];
}

/** MOUNT v3: each volume is an export, `/<key>` (its id). */
export class Mount3Program implements RpcProgram {
  readonly program = MOUNT_PROGRAM;
  readonly version = 3;
  readonly #volumes: readonly Handles[];

  constructor(volumes: readonly Handles[]) {
    this.#volumes = volumes;
  }

  async call(procedure: number, args: XdrReader): Promise<ProgramReply> {
    const out = new XdrWriter();
    switch (procedure) {
      case 0: // NULL
      case 4: // UMNTALL
        return ok(out);
      case 3: // UMNT
        args.string(1024);
        return ok(out);
      case 1: {
        // MNT
        const path = args.string(1024).replace(/\/+$/, "");
        const volume = this.#volumes.find((v) => `/${v.key}` === path);
        if (!volume) return ok(out.u32(2)); // MNT3ERR_NOENT
        out.u32(0).opaque(volume.handleOf(volume.rootIno)).u32(1).u32(1); // one flavor: AUTH_UNIX
        return ok(out);
      }
      case 2: // DUMP: no mounts recorded
        return ok(out.bool(false));
      case 5: // EXPORT: each volume, to whoever reaches the server (its sandbox alone)
        for (const volume of this.#volumes) out.bool(true).string(`/${volume.key}`).bool(false);
        return ok(out.bool(false));
      default:
        return { stat: AcceptStat.PROC_UNAVAIL };
    }
  }
}

// --- encoding ------------------------------------------------------------------------------

function readName(args: XdrReader): string {
  const name = args.string(MAX_NAME_BYTES + 1);
  if (name.length === 0 || name.includes("/") || name.includes("\0")) {
    throw new NfsError(Status.INVAL);
  }
  if (Buffer.byteLength(name) > MAX_NAME_BYTES) throw new NfsError(Status.NAMETOOLONG);
  if (name === "..") throw new NfsError(Status.INVAL);
  return name;
}

/** A sattr3: no set-uid or set-gid bit, no owner 0 (squashed), no size past MAX_OFFSET. */
function readSetAttributes(args: XdrReader): SetAttributes {
  const wanted: SetAttributes = {};
  if (args.bool()) wanted.mode = args.u32() & KEPT_MODE_BITS;
  if (args.bool()) wanted.uid = squashed(args.u32());
  if (args.bool()) wanted.gid = squashed(args.u32());
  if (args.bool()) {
    wanted.size = args.u64();
    if (wanted.size > MAX_OFFSET) throw new NfsError(Status.FBIG);
  }
  for (const key of ["atime", "mtime"] as const) {
    const how = args.u32();
    if (how === 1) wanted[key] = "server";
    if (how === 2) wanted[key] = new Date(args.u32() * 1000 + Math.floor(args.u32() / 1e6));
  }
  return wanted;
}

async function setOnOpen(entry: FileHandle, wanted: SetAttributes): Promise<void> {
  if (wanted.uid !== undefined || wanted.gid !== undefined) {
    await entry.chown(wanted.uid ?? -1, wanted.gid ?? -1);
  }
  if (wanted.mode !== undefined) await entry.chmod(wanted.mode);
  if (wanted.size !== undefined) await entry.truncate(Number(wanted.size));
  if (wanted.atime !== undefined || wanted.mtime !== undefined) {
    const stats = await entry.stat();
    await entry.utimes(timeOf(wanted.atime, stats.atimeMs), timeOf(wanted.mtime, stats.mtimeMs));
  }
}

/**
 * A chown to root stored as the anonymous id: kept as asked it would let one sandbox's root
 * leave root's files for another; squashed rather than refused, because `tar -x`, `cp -a` and
 * `rsync -a` run as root chown what they make to 0 and fail outright on EPERM.
 */
function squashed(id: number): number {
  return id === 0 ? NOBODY_ID : id;
}

/** Clears set-uid and set-gid bits an entry has (inherited, planted); its stats after. */
async function withoutSetId(entry: FileHandle): Promise<BigIntStats> {
  const stats = await entry.stat({ bigint: true });
  if ((stats.mode & 0o6000n) === 0n) return stats;
  await entry.chmod(Number(stats.mode) & KEPT_MODE_BITS);
  return entry.stat({ bigint: true });
}

function bigMin(a: bigint, b: bigint): bigint {
  return a < b ? a : b;
}

/** The indexes of the names from `start` that fit a reply of `budget` bytes. */
function pageOf(listing: Listing, start: number, budget: number, plus: boolean): number[] {
  // Status, the directory's attributes, the verifier, the list's end and eof.
  let used = 4 + 88 + 8 + 8;
  const page: number[] = [];
  for (let index = start; index < listing.names.length; index++) {
    const nameBytes = Buffer.byteLength(listing.names[index] as string);
    // entry3: follows, fileid, name, cookie; entryplus3: attributes and a handle too.
    const size =
      4 + 8 + 4 + ((nameBytes + 3) & ~3) + 8 + (plus ? 4 + 84 + 4 + 4 + HANDLE_BYTES : 0);
    if (used + size > budget) break;
    used += size;
    page.push(index);
  }
  return page;
}

/** An EXCLUSIVE create's verifier kept as the new file's access and modification seconds. */
function verifierTimes(verifier: Buffer): { atime: Date; mtime: Date } {
  return {
    atime: new Date(verifier.readUInt32BE(0) * 1000),
    mtime: new Date(verifier.readUInt32BE(4) * 1000),
  };
}

async function hasTimes(path: string, times: { atime: Date; mtime: Date } | undefined) {
  if (!times) return false;
  const stats = await lstat(path).catch(() => undefined);
  return (
    stats?.isFile() === true &&
    Math.floor(stats.atimeMs / 1000) * 1000 === times.atime.getTime() &&
    Math.floor(stats.mtimeMs / 1000) * 1000 === times.mtime.getTime()
  );
}

function timeOf(wanted: "server" | Date | undefined, currentMs: number | bigint): Date {
  if (wanted === "server") return new Date();
  return wanted ?? new Date(Number(currentMs));
}

function typeOf(stats: BigIntStats): number {
  if (stats.isFile()) return FileType.REG;
  if (stats.isDirectory()) return FileType.DIR;
  if (stats.isSymbolicLink()) return FileType.LNK;
  if (stats.isFIFO()) return FileType.FIFO;
  if (stats.isSocket()) return FileType.SOCK;
  if (stats.isBlockDevice()) return FileType.BLK;
  return FileType.CHR;
}

function writeTime(out: XdrWriter, ns: bigint): void {
  out.u32(Number(ns / 1_000_000_000n)).u32(Number(ns % 1_000_000_000n));
}

function writeAttributes(out: XdrWriter, stats: BigIntStats): XdrWriter {
  out
    .u32(typeOf(stats))
    .u32(Number(stats.mode) & KEPT_MODE_BITS)
    .u32(Number(stats.nlink))
    .u32(Number(stats.uid))
    .u32(Number(stats.gid))
    .u64(stats.size)
    .u64(stats.blocks * 512n)
    .u32(0)
    .u32(0) // rdev: no devices are made
    .u64(stats.dev)
    .u64(stats.ino);
  writeTime(out, stats.atimeNs);
  writeTime(out, stats.mtimeNs);
  writeTime(out, stats.ctimeNs);
  return out;
}

/** wcc_data with no pre-operation attributes (the client then refetches when it must). */
function writeWcc(out: XdrWriter, after: BigIntStats): XdrWriter {
  return writeAttributes(out.bool(false).bool(true), after);
}

function emptyWcc(out: XdrWriter): XdrWriter {
  return out.bool(false).bool(false);
}

function toNfsError(err: unknown): NfsError {
  if (err instanceof NfsError) return err;
  switch ((err as NodeJS.ErrnoException).code) {
    case "ENOENT":
      return new NfsError(Status.NOENT);
    case "EEXIST":
      return new NfsError(Status.EXIST);
    case "ENOTDIR":
      return new NfsError(Status.NOTDIR);
    case "EISDIR":
      return new NfsError(Status.ISDIR);
    case "ENOTEMPTY":
      return new NfsError(Status.NOTEMPTY);
    case "ELOOP":
      return new NfsError(Status.INVAL); // a link where a directory or file was asked for
    case "EXDEV":
      return new NfsError(Status.XDEV);
    case "ENOSPC":
      return new NfsError(Status.NOSPC);
    case "EDQUOT":
      return new NfsError(Status.DQUOT);
    case "EMLINK":
      return new NfsError(Status.MLINK);
    case "EFBIG":
      return new NfsError(Status.FBIG);
    case "ENAMETOOLONG":
      return new NfsError(Status.NAMETOOLONG);
    case "EPERM":
      return new NfsError(Status.PERM);
    case "EACCES":
      return new NfsError(Status.ACCES);
    case "EINVAL":
      return new NfsError(Status.INVAL);
    case "ENXIO":
      return new NfsError(Status.INVAL);
    default:
      return new NfsError(Status.IO);
  }
}
