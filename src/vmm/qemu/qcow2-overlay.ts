import { constants } from "node:fs";
import { type FileHandle, open } from "node:fs/promises";
import { VmmError } from "../errors.js";
import { readQcow2Header } from "./qcow2-header.js";

/**
 * Writes an empty qcow2 (v3) overlay on a backing image, as `qemu-img create -b` would, in
 * process: snapshots, pauses and restores each need a fresh overlay, and spawning qemu-img
 * costs tens of milliseconds. Layout: cluster 0 header (+ backing format extension and
 * backing name), 1 refcount table, 2 refcount block (clusters 0-3 in use), 3 L1 table.
 */
const CLUSTER_BITS = 16;
const CLUSTER = 1 << CLUSTER_BITS;
const HEADER_LENGTH = 104;
const EXT_BACKING_FORMAT = 0xe2792aca;
const L2_ENTRIES = CLUSTER / 8;
const QCOW2_MAGIC = 0x514649fb;

function align8(n: number): number {
  return (n + 7) & ~7;
}

/**
 * Opens a disk image to read its size or header: without waiting (a FIFO would block the
 * open), and through a link only when `followLinks` (the guest images, named by the
 * server's configuration; never a file a VMM had in its hands). It must be a plain file.
 */
export async function openImage(path: string, followLinks = false): Promise<FileHandle> {
  const flags =
    constants.O_RDONLY | constants.O_NONBLOCK | (followLinks ? 0 : constants.O_NOFOLLOW);
  let handle: FileHandle;
  try {
    handle = await open(path, flags);
  } catch (err) {
    throw new VmmError(`cannot open disk image ${path}: ${(err as Error).message}`, undefined, {
      cause: err,
    });
  }
  if (!(await handle.stat()).isFile()) {
    await handle.close();
    throw new VmmError(`disk image ${path} is not a plain file`);
  }
  return handle;
}

/**
 * Virtual size of a disk image: a qcow2's header field (the header checked: qcow2-header.ts),
 * or a raw file's length. `followLinks`: see openImage.
 */
export async function virtualSize(path: string, followLinks = false): Promise<bigint> {
  const handle = await openImage(path, followLinks);
  try {
    const magic = Buffer.alloc(4);
    await handle.read(magic, 0, 4, 0);
    if (magic.readUInt32BE(0) === QCOW2_MAGIC)
      return (await readQcow2Header(handle, path)).virtualSize;
    return BigInt((await handle.stat()).size);
  } finally {
    await handle.close();
  }
}

export interface OverlayOptions {
  /** Grows the overlay beyond its backing image (never shrinks it). */
  readonly minSizeBytes?: bigint;
  /**
   * The VMM account it is handed to, through the new file's handle (its directory may be the
   * VMM's, where a path could be swapped for a link between creating and chowning).
   */
  readonly owner?: { uid: number; gid: number };
  /**
   * What the header names (default `backing`); a relative name is taken from the overlay's
   * own directory by whoever follows it (QEMU is always handed the chain).
   */
  readonly backingName?: string;
  /**
   * The backing image's virtual size, when the caller knows it: the backing is then not
   * read (a fork's frozen disk, still its VMM's to write). Otherwise it is read, through a
   * link too (the guest images, test images).
   */
  readonly backingSize?: bigint;
}

/** Returns the overlay's virtual size. */
export async function createOverlay(
  path: string,
  backing: string,
  backingFormat: "qcow2" | "raw",
  options: OverlayOptions = {},
): Promise<bigint> {
  const minSizeBytes = options.minSizeBytes ?? 0n;
  const backingSize = options.backingSize ?? (await virtualSize(backing, true));
  const size = minSizeBytes > backingSize ? minSizeBytes : backingSize;
  const l1Size = Number((size + BigInt(CLUSTER * L2_ENTRIES) - 1n) / BigInt(CLUSTER * L2_ENTRIES));
  const backingName = Buffer.from(options.backingName ?? backing, "utf8");
  const formatName = Buffer.from(backingFormat, "ascii");
  const extensionsLength = 8 + align8(formatName.length) + 8;
  const backingOffset = HEADER_LENGTH + extensionsLength;
  if (backingOffset + backingName.length > CLUSTER)
    throw new VmmError(`backing path too long: ${backing}`);

  const file = Buffer.alloc(3 * CLUSTER + Math.max(l1Size, 1) * 8);
  file.writeUInt32BE(QCOW2_MAGIC, 0); // "QFI\xfb"
  file.writeUInt32BE(3, 4); // version
  file.writeBigUInt64BE(BigInt(backingOffset), 8);
  file.writeUInt32BE(backingName.length, 16);
  file.writeUInt32BE(CLUSTER_BITS, 20);
  file.writeBigUInt64BE(size, 24);
  file.writeUInt32BE(0, 32); // no encryption
  file.writeUInt32BE(l1Size, 36);
  file.writeBigUInt64BE(BigInt(3 * CLUSTER), 40); // L1 table
  file.writeBigUInt64BE(BigInt(CLUSTER), 48); // refcount table
  file.writeUInt32BE(1, 56); // refcount table clusters
  // nb_snapshots, snapshots_offset, feature bits: zero
  file.writeUInt32BE(4, 96); // refcount_order: 16-bit refcounts
  file.writeUInt32BE(HEADER_LENGTH, 100);
  let at = HEADER_LENGTH;
  file.writeUInt32BE(EXT_BACKING_FORMAT, at);
  file.writeUInt32BE(formatName.length, at + 4);
  formatName.copy(file, at + 8);
  at += 8 + align8(formatName.length);
  at += 8; // end-of-extensions marker: type 0, length 0
  backingName.copy(file, backingOffset);
  file.writeBigUInt64BE(BigInt(2 * CLUSTER), CLUSTER); // refcount table → block at cluster 2
  for (let cluster = 0; cluster < 4; cluster++) file.writeUInt16BE(1, 2 * CLUSTER + cluster * 2);

  const handle = await open(path, "wx", 0o600);
  try {
    await handle.write(file, 0, file.length, 0);
    if (options.owner) await handle.chown(options.owner.uid, options.owner.gid);
  } finally {
    await handle.close();
  }
  return size;
}

export function imageFormat(path: string): "qcow2" | "raw" {
  return path.endsWith(".qcow2") ? "qcow2" : "raw";
}

/**
 * The backing file name a qcow2 header records (undefined for none), the header checked
 * (qcow2-header.ts). Only to compare with the chain Warren recorded: never to open.
 */
export async function headerBacking(path: string): Promise<string | undefined> {
  const handle = await openImage(path);
  try {
    return (await readQcow2Header(handle, path)).backingName;
  } finally {
    await handle.close();
  }
}
