import type { FileHandle } from "node:fs/promises";
import { SnapshotTamperedError } from "../errors.js";

/**
 * Reads the header of a qcow2 image a VMM had in its hands (its overlay, frozen into a
 * snapshot), and refuses one that would make whoever opens it next reach anything but the
 * image and the chain Warren passes explicitly: QEMU opens a restore's layers while still
 * root, and a header can name an external data file (any host path, opened with the image
 * and read and written in its place) or an encryption key, hold internal snapshots, or set a
 * feature bit whose meaning this code does not know. Warren's overlays (qcow2-overlay.ts,
 * and QEMU writing guest data into them) carry none of that, so anything beyond what they
 * carry is refused: only the backing name (which is compared with Warren's records, never
 * followed) and the backing format and feature name table extensions.
 *
 * The extension area is walked as QEMU walks it (`qcow2_read_extensions`), so that QEMU
 * sees no extension this code did not.
 */

const QCOW2_MAGIC = 0x514649fb;
/** The fixed part of a version 3 header; the first cluster holds the rest. */
const V3_HEADER_LENGTH = 104;
/** QEMU's limit on a backing file name. */
const MAX_BACKING_NAME = 1023;
/**
 * The largest virtual size accepted: Warren's disks are far smaller, and an overlay written
 * on the image allocates 8 bytes of L1 table per 512 MiB of it (at most 1 MiB here).
 */
export const MAX_VIRTUAL_SIZE = 64n << 40n;

/** Incompatible feature bits QEMU may set on a Warren disk, and those refused by name. */
const ALLOWED_INCOMPATIBLE: Readonly<Record<number, string>> = {
  0: "dirty",
  3: "compression type",
  4: "extended L2 entries",
};
const REFUSED_INCOMPATIBLE: Readonly<Record<number, string>> = {
  1: "corrupt",
  2: "external data file",
};

const EXT_END = 0x00000000;
const EXT_BACKING_FORMAT = 0xe2792aca;
const EXT_FEATURE_TABLE = 0x6803f857;
/** Extensions Warren's disks never carry, by name (any other is refused as unknown). */
const REFUSED_EXTENSIONS: Readonly<Record<number, string>> = {
  1145132097: "an external data file",
  87539319: "a full-disk encryption header",
  595929205: "persistent bitmaps",
};

export interface Qcow2Header {
  readonly virtualSize: bigint;
  /** The backing file name the header records (only ever compared with Warren's records). */
  readonly backingName: string | undefined;
}

function refused(path: string, why: string): SnapshotTamperedError {
  return new SnapshotTamperedError(
    `${path}: its qcow2 header ${why}; a disk a VMM wrote is never opened with it`,
  );
}

/**
 * The checked header of the qcow2 image open in `handle` (`path` names it in refusals):
 * version 3, no encryption, no internal snapshots, no incompatible feature but those QEMU
 * sets on Warren's disks, no extension but the backing format and feature names, a backing
 * name within the first cluster, a virtual size up to MAX_VIRTUAL_SIZE.
 */
export async function readQcow2Header(handle: FileHandle, path: string): Promise<Qcow2Header> {
  const fixed = Buffer.alloc(V3_HEADER_LENGTH);
  const { bytesRead } = await handle.read(fixed, 0, fixed.length, 0);
  if (bytesRead < 32 || fixed.readUInt32BE(0) !== QCOW2_MAGIC)
    throw refused(path, "is not a qcow2 header");
  const version = fixed.readUInt32BE(4);
  if (version !== 3) throw refused(path, `is of version ${version}, not 3`);
  if (bytesRead < V3_HEADER_LENGTH) throw refused(path, "is cut short");
  const backingOffset = fixed.readBigUInt64BE(8);
  const backingLength = fixed.readUInt32BE(16);
  const clusterBits = fixed.readUInt32BE(20);
  const virtualSize = fixed.readBigUInt64BE(24);
  const cryptMethod = fixed.readUInt32BE(32);
  const snapshots = fixed.readUInt32BE(60);
  const incompatible = fixed.readBigUInt64BE(72);
  const headerLength = fixed.readUInt32BE(100);
  if (clusterBits < 9 || clusterBits > 21)
    throw refused(path, `has clusters of 2^${clusterBits} bytes`);
  const clusterSize = 1 << clusterBits;
  if (cryptMethod !== 0) throw refused(path, `encrypts the image (method ${cryptMethod})`);
  if (snapshots !== 0) throw refused(path, `holds ${snapshots} internal snapshots`);
  if (virtualSize > MAX_VIRTUAL_SIZE)
    throw refused(path, `gives a virtual size of ${virtualSize} bytes`);
  for (let bit = 0; bit < 64; bit++) {
    if ((incompatible & (1n << BigInt(bit))) === 0n || ALLOWED_INCOMPATIBLE[bit]) continue;
    const name = REFUSED_INCOMPATIBLE[bit];
    throw refused(
      path,
      name
        ? `sets the ${name} incompatible feature`
        : `sets unknown incompatible feature bit ${bit}`,
    );
  }
  if (headerLength < V3_HEADER_LENGTH || headerLength > clusterSize)
    throw refused(path, `has a header length of ${headerLength}`);
  if (backingOffset > BigInt(clusterSize))
    throw refused(path, `puts its backing name at ${backingOffset}, beyond its first cluster`);
  if (backingLength > MAX_BACKING_NAME || Number(backingOffset) + backingLength > clusterSize)
    throw refused(path, `has a backing name of ${backingLength} bytes`);

  // The first cluster holds the extensions and the backing name.
  const cluster = Buffer.alloc(clusterSize);
  const got = (await handle.read(cluster, 0, clusterSize, 0)).bytesRead;
  const end = backingOffset > 0n ? Number(backingOffset) : clusterSize;
  if (got < Math.min(end, clusterSize)) throw refused(path, "is cut short");
  checkExtensions(cluster, headerLength, end, path);

  let backingName: string | undefined;
  if (backingOffset > 0n && backingLength > 0) {
    const at = Number(backingOffset);
    if (got < at + backingLength) throw refused(path, "is cut short");
    backingName = cluster.toString("utf8", at, at + backingLength);
  }
  return { virtualSize, backingName };
}

/** Walks the extensions from `start` to `end` as QEMU does, refusing all but two kinds. */
function checkExtensions(cluster: Buffer, start: number, end: number, path: string): void {
  let offset = start;
  while (offset < end) {
    if (offset + 8 > cluster.length) throw refused(path, "has extensions beyond its first cluster");
    const type = cluster.readUInt32BE(offset);
    const length = cluster.readUInt32BE(offset + 4);
    offset += 8;
    if (offset > end || length > end - offset) throw refused(path, "has an extension too large");
    if (type === EXT_END) return;
    if (type !== EXT_BACKING_FORMAT && type !== EXT_FEATURE_TABLE) {
      const name = REFUSED_EXTENSIONS[type];
      throw refused(
        path,
        name
          ? `carries ${name}`
          : `carries an unknown extension 0x${type.toString(16).padStart(8, "0")}`,
      );
    }
    offset += (length + 7) & ~7;
  }
}
