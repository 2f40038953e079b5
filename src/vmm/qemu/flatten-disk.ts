import { execFile } from "node:child_process";
import { chmod, chown, copyFile, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { VmmError } from "../errors.js";
import { DISK_FILE } from "./snapshot-meta.js";

const run = promisify(execFile);
const FLATTENING_FILE = `${DISK_FILE}.flattening`;

/**
 * Replaces the frozen disk of `snapshotDir` with one stacked directly on `ontoDir`'s frozen
 * disk, holding every cluster the layers in between wrote. The guest-visible content is
 * unchanged, so whatever names this disk by path (overlays of running VMs, later snapshots)
 * keeps working; a VMM that already opened the old file keeps its inode.
 *
 * `qemu-img rebase` in safe mode does the copy. Because `ontoDir`'s disk is in the old chain,
 * it only compares the clusters allocated above it, so the cost is what those layers wrote,
 * not the disk's size. It runs at the lowest CPU priority: flattening is background work.
 */
export async function flattenDisk(
  snapshotDir: string,
  ontoDir: string,
  owner?: { uid: number; gid: number },
): Promise<void> {
  const disk = join(snapshotDir, DISK_FILE);
  const work = join(snapshotDir, FLATTENING_FILE);
  const onto = join(ontoDir, DISK_FILE);
  try {
    await copyFile(disk, work);
    const args = ["-n", "19", "qemu-img", "rebase", "-q", "-f", "qcow2"];
    await run("nice", [...args, "-b", onto, "-F", "qcow2", work]);
    const { mode } = await stat(disk);
    await chmod(work, mode & 0o777);
    if (owner) await chown(work, owner.uid, owner.gid);
    await rename(work, disk);
  } catch (err) {
    await rm(work, { force: true });
    const stderr = (err as { stderr?: string }).stderr?.trim();
    throw new VmmError(
      `flattening ${disk} onto ${onto} failed${stderr ? `: ${stderr}` : ""}`,
      undefined,
      { cause: err },
    );
  }
}
