import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { DiskBacking, SnapshotMeta } from "../driver.js";
import { SnapshotMismatchError, VmmError } from "../errors.js";
import type { DiskLayer } from "./args.js";

/**
 * Bumped when a capture no longer fits the VMs Warren starts: 3 added the virtio-rng device
 * (a device state saved without it would load into a machine with other transports) and
 * the disk's recorded backing (`diskBacking`), which restores pass QEMU explicitly.
 */
export const SNAPSHOT_FORMAT_VERSION = 3;
export const META_FILE = "meta.json";
export const MEMORY_FILE = "memory.img";
export const MEMORY_DIFF_FILE = "memory.diff";
export const DEVICE_STATE_FILE = "devstate.bin";
export const DISK_FILE = "disk.qcow2";

/** Chains deeper than this are refused (a loop of records, or flattening that never ran). */
const MAX_CHAIN = 1000;

export async function writeSnapshotMeta(
  dir: string,
  meta: SnapshotMeta,
  file = META_FILE,
): Promise<void> {
  await writeFile(join(dir, file), `${JSON.stringify(meta, null, 2)}\n`, { flag: "wx" });
}

/**
 * The images below a snapshot's disk, nearest first, from the snapshots' own records (each
 * meta.json is root's, sealed and checked): what QEMU is given as the disk's backing chain.
 */
export async function diskChain(snapshotDir: string): Promise<DiskLayer[]> {
  const chain: DiskLayer[] = [{ file: join(snapshotDir, DISK_FILE), format: "qcow2" }];
  let below: DiskBacking | undefined = (await readSnapshotMeta(snapshotDir)).diskBacking;
  while (below) {
    if (chain.length > MAX_CHAIN)
      throw new VmmError(`snapshot ${snapshotDir}: disk chain deeper than ${MAX_CHAIN}`);
    chain.push({ file: below.file, format: below.format });
    below = below.snapshotDir ? (await readSnapshotMeta(below.snapshotDir)).diskBacking : undefined;
  }
  return chain;
}

export async function readSnapshotMeta(dir: string): Promise<SnapshotMeta> {
  let text: string;
  try {
    text = await readFile(join(dir, META_FILE), "utf8");
  } catch (err) {
    throw new VmmError(`snapshot ${dir} has no readable ${META_FILE}`, undefined, { cause: err });
  }
  const meta = JSON.parse(text) as SnapshotMeta;
  if (meta.formatVersion !== SNAPSHOT_FORMAT_VERSION) {
    throw new SnapshotMismatchError(
      `snapshot ${dir} has format version ${meta.formatVersion}; this Warren reads version ${SNAPSHOT_FORMAT_VERSION}`,
    );
  }
  return meta;
}

export interface RestoreHost {
  readonly accel: SnapshotMeta["accel"];
  readonly cpuModel: string;
  readonly qemuVersion: string;
  readonly kernel: string;
  readonly images: string;
}

/** Refuses a restore the snapshot cannot survive, naming every difference. */
export function checkRestorable(
  meta: SnapshotMeta,
  host: RestoreHost,
  shape: SnapshotMeta["shape"],
): void {
  const problems: string[] = [];
  const differ = (what: string, was: unknown, now: unknown) => {
    if (was !== now) problems.push(`${what} was ${String(was)}, here ${String(now)}`);
  };
  differ("accelerator", meta.accel, host.accel);
  differ("CPU model", meta.cpuModel, host.cpuModel);
  differ("QEMU version", meta.qemuVersion, host.qemuVersion);
  differ("kernel", meta.kernel, host.kernel);
  differ("guest images", meta.images, host.images);
  differ("vCPUs", meta.shape.vcpus, shape.vcpus);
  differ("memory MiB", meta.shape.memoryMiB, shape.memoryMiB);
  if (problems.length > 0)
    throw new SnapshotMismatchError(`snapshot cannot be restored here: ${problems.join("; ")}`);
}
