import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { SnapshotMeta } from "../driver.js";
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
