import { createHash } from "node:crypto";
import { constants } from "node:fs";
import { chmod, type FileHandle, open, readdir } from "node:fs/promises";
import { join } from "node:path";
import { SnapshotTamperedError, VmmError } from "../errors.js";
import { readQcow2Header } from "./qcow2-header.js";
import { DISK_FILE } from "./snapshot-meta.js";

/** A file of a sealed snapshot: what the catalog records and a restore checks. */
export interface SealedFile {
  readonly name: string;
  readonly bytes: number;
  readonly sha256: string;
}

/**
 * How a file a VMM could have replaced is opened: never through a link, and without waiting
 * (opening a FIFO for reading blocks until someone writes it, holding one of the few
 * threads every file operation of the server shares). Its type is checked on the handle.
 */
const NOFOLLOW_READ = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/**
 * Opens a file a VMM could have replaced (it lived in the VMM's runtime directory) without
 * following a link and without blocking, and checks it is a plain file with one name
 * (`links`: two for a disk frozen while its VMM runs on): never a symlink, FIFO, device or
 * hard link to something of the host's.
 */
export async function openPlainFile(path: string, links = 1): Promise<FileHandle> {
  let handle: FileHandle;
  try {
    handle = await open(path, NOFOLLOW_READ);
  } catch (err) {
    throw new VmmError(`cannot open ${path} safely: ${(err as Error).message}`, undefined, {
      cause: err,
    });
  }
  const stat = await handle.stat();
  if (!stat.isFile() || stat.nlink > links) {
    await handle.close();
    throw new VmmError(`${path} is not a plain file of its own (a VMM may have replaced it)`);
  }
  return handle;
}

async function sha256Of(handle: FileHandle): Promise<{ bytes: number; sha256: string }> {
  const hash = createHash("sha256");
  let bytes = 0;
  const chunks = handle.createReadStream({ start: 0, autoClose: false, highWaterMark: 1 << 20 });
  for await (const chunk of chunks) {
    hash.update(chunk as Buffer);
    bytes += (chunk as Buffer).length;
  }
  return { bytes, sha256: hash.digest("hex") };
}

/**
 * Makes a captured snapshot immutable: every file root's own and read-only to root alone
 * (changed through the open handle, never by path), the directory too; the disk's qcow2
 * header must hold nothing but what Warren's disks hold (qcow2-header.ts). `links`: files that
 * may have a second name (a frozen disk the source VMM still runs on). Checksums come after,
 * off the capture's path (SnapshotVerifier.checksum): no one but root can change a file from
 * here on. Returns each file's identity as sealed (SnapshotVerifier.sealed).
 */
export async function sealSnapshot(
  dir: string,
  links: Readonly<Record<string, number>> = {},
): Promise<Map<string, string>> {
  const sealed = new Map<string, string>();
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (!entry.isFile()) throw new VmmError(`snapshot ${dir} holds ${entry.name}, not a file`);
    const path = join(dir, entry.name);
    const handle = await openPlainFile(path, links[entry.name] ?? 1);
    try {
      // The disk is the VMM's overlay: whatever it made of its header is refused here.
      if (entry.name === DISK_FILE) await readQcow2Header(handle, path);
      await handle.chown(0, 0);
      await handle.chmod(0o400);
      sealed.set(entry.name, identityOf(await handle.stat({ bigint: true })));
    } finally {
      await handle.close();
    }
  }
  await chmod(dir, 0o700);
  return sealed;
}

/**
 * Seals one file of a snapshot directory and checksums it (see sealSnapshot); `qcow2`: a
 * disk, whose header is checked first.
 */
export async function sealFile(
  dir: string,
  name: string,
  options: { links?: number; qcow2?: boolean } = {},
): Promise<SealedFile> {
  const path = join(dir, name);
  const handle = await openPlainFile(path, options.links ?? 1);
  try {
    if (options.qcow2) await readQcow2Header(handle, path);
    await handle.chown(0, 0);
    await handle.chmod(0o400);
    return { name, ...(await sha256Of(handle)) };
  } finally {
    await handle.close();
  }
}

/** A file's identity: unchanged while its inode, size and change time are. */
function identityOf(stat: { dev: bigint; ino: bigint; size: bigint; ctimeNs: bigint }): string {
  return `${stat.dev}:${stat.ino}:${stat.size}:${stat.ctimeNs}`;
}

/** Whether a file is as sealing leaves it: a plain file, root's, read-only. */
function isSealed(stat: { isFile(): boolean; uid: bigint; mode: bigint }): boolean {
  return stat.isFile() && stat.uid === 0n && (Number(stat.mode) & 0o222) === 0;
}

/**
 * Checks a snapshot's files against what the catalog recorded when it was sealed. Hashing a
 * memory image on every restore would cost more than the restore, so a file whose identity
 * (inode, size, ctime — which no one can set back without changing the clock) is unchanged
 * since it last matched is trusted; otherwise it is hashed again.
 */
export class SnapshotVerifier {
  readonly #verified = new Map<string, string>();
  /** Snapshots sealed by this process: each file's identity then, by directory. */
  readonly #sealed = new Map<string, Map<string, string>>();

  /** Records what `sealSnapshot` returned for `dir`. */
  sealed(dir: string, identities: Map<string, string>): void {
    this.#sealed.set(dir, identities);
  }

  /**
   * Whether `dir` holds exactly the files this process sealed there, each still root's,
   * read-only and of the identity it had then (a write since would have changed its ctime).
   * Then a restore needs no checksum: it could only prove what sealing already knew, and
   * need not wait for it (a fork's children restore right after the capture).
   */
  async unchangedSinceSealed(dir: string): Promise<boolean> {
    const sealed = this.#sealed.get(dir);
    if (!sealed) return false;
    const names = await readdir(dir).catch(() => [] as string[]);
    if (names.length !== sealed.size) return false;
    for (const name of names) {
      const identity = sealed.get(name);
      if (identity === undefined) return false;
      const handle = await open(join(dir, name), NOFOLLOW_READ).catch(() => undefined);
      if (!handle) return false;
      try {
        const stat = await handle.stat({ bigint: true });
        if (!isSealed(stat) || identityOf(stat) !== identity) return false;
      } finally {
        await handle.close();
      }
    }
    return true;
  }

  /**
   * Each file of a sealed snapshot with its size and SHA-256, for the catalog. What is
   * hashed here is what the catalog will expect, so each file counts as verified as it is
   * now: a restore right after the capture does not hash it again.
   */
  async checksum(dir: string): Promise<SealedFile[]> {
    const sealed: SealedFile[] = [];
    for (const name of (await readdir(dir)).sort()) {
      const path = join(dir, name);
      // A frozen disk may have a second name while its source VMM runs on.
      const handle = await openPlainFile(path, 2);
      try {
        const stat = await handle.stat({ bigint: true });
        if (!isSealed(stat)) throw new VmmError(`${path} is not sealed (root's, read-only)`);
        sealed.push({ name, ...(await sha256Of(handle)) });
        this.#verified.set(path, identityOf(stat));
      } finally {
        await handle.close();
      }
    }
    return sealed;
  }

  async verify(dir: string, expected: readonly SealedFile[]): Promise<void> {
    const names = new Set(await readdir(dir).catch(() => [] as string[]));
    for (const file of expected) {
      const path = join(dir, file.name);
      if (!names.has(file.name)) throw new SnapshotTamperedError(`${path} is missing`);
      const handle = await open(path, NOFOLLOW_READ).catch((err: Error) => {
        throw new SnapshotTamperedError(`${path} cannot be opened: ${err.message}`);
      });
      try {
        const stat = await handle.stat({ bigint: true });
        if (!isSealed(stat))
          throw new SnapshotTamperedError(`${path} is no longer root's read-only file`);
        const identity = identityOf(stat);
        if (this.#verified.get(path) === identity) continue;
        const actual = await sha256Of(handle);
        if (actual.sha256 !== file.sha256 || actual.bytes !== file.bytes)
          throw new SnapshotTamperedError(
            `${path} changed since it was captured (sha256 ${actual.sha256}, recorded ${file.sha256})`,
          );
        this.#verified.set(path, identity);
      } finally {
        await handle.close();
      }
    }
  }
}
