import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Accelerator, MachineShape } from "../driver.js";
import { SnapshotMismatchError, VmmError } from "../errors.js";

/**
 * Bumped when a capture no longer fits the VMs Warren starts or the Warren that reads it: 3
 * added the virtio-rng device (a device state saved without it would load into a machine
 * with other transports) and the disk's recorded backing (`diskBacking`); 4 records other
 * snapshots' files by sibling name instead of absolute path (snapshot-chain.ts), so a
 * snapshot copied to another node with its ancestors beside it restores there.
 */
export const SNAPSHOT_FORMAT_VERSION = 4;
export const META_FILE = "meta.json";
export const MEMORY_FILE = "memory.img";
export const MEMORY_DIFF_FILE = "memory.diff";
export const DEVICE_STATE_FILE = "devstate.bin";
export const DISK_FILE = "disk.qcow2";

/** What a snapshot was taken on; a restore on anything else is refused, never attempted. */
export interface SnapshotMeta {
  readonly formatVersion: number;
  readonly accel: Accelerator;
  readonly cpuModel: string;
  readonly qemuVersion: string;
  readonly kernel: string;
  /** GuestImages.fingerprint of the images the snapshot's guest was booted from. */
  readonly images: string;
  /** The guest kernel's command line at boot, carried through every capture since. */
  readonly kernelCommandLine?: string;
  readonly shape: MachineShape;
  /** The full memory image the guest's RAM is mapped from: the snapshot's own or a sibling's. */
  readonly memoryImage: SnapshotFileRef;
  /** Pages that differ from `memoryImage` (file in the snapshot directory), written in at restore. */
  readonly memoryDiff?: string;
  readonly diffPages: number;
  /** Files inside the snapshot directory. */
  readonly deviceStateFile: string;
  readonly diskFile: string;
  /**
   * The image `diskFile` is stacked on, as Warren made it: a restore passes QEMU the whole
   * chain from these records and never reads a backing path from a qcow2 header.
   */
  readonly diskBacking: DiskBacking;
  readonly createdAt: string;
}

/**
 * A file of a snapshot named without a path: the referencing snapshot's own (no `snapshot`),
 * or one of a sibling snapshot's, by the sibling's directory name. Snapshots that stand on
 * each other lie side by side in one directory, wherever that is: a snapshot copied to
 * another node with its ancestors beside it resolves to the same files there.
 */
export interface SnapshotFileRef {
  /** The directory name of the snapshot holding the file, beside the referencing one. */
  readonly snapshot?: string;
  /** A file name in that directory. */
  readonly file: string;
}

/**
 * A disk's backing image: a sibling snapshot's frozen disk (whose meta.json names the next
 * image down), or an image outside every snapshot (the base rootfs), by absolute path: the
 * guest images have the same path on every node, and their fingerprint is checked.
 */
export type DiskBacking =
  | { readonly snapshot: string; readonly file: string; readonly format: "qcow2" }
  | { readonly image: string; readonly format: "qcow2" | "raw" };

export async function writeSnapshotMeta(
  dir: string,
  meta: SnapshotMeta,
  file = META_FILE,
): Promise<void> {
  await writeFile(join(dir, file), `${JSON.stringify(meta, null, 2)}\n`, { flag: "wx" });
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
