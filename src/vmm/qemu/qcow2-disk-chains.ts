import { execFile } from "node:child_process";
import { copyFile, readdir, rename, rm } from "node:fs/promises";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import type { DiskChains, FlattenPlan } from "../disk-chains.js";
import type { SnapshotFile } from "../driver.js";
import { VmmError } from "../errors.js";
import {
  createOverlay,
  headerBacking,
  imageFormat,
  type OverlayOptions,
  virtualSize,
} from "./qcow2-overlay.js";
import { type SealedFile, sealFile } from "./sealed-files.js";
import { backingRecord, type ChainLayer, headerName, readChain } from "./snapshot-chain.js";
import { DISK_FILE, META_FILE, writeSnapshotMeta } from "./snapshot-meta.js";

const run = promisify(execFile);
const NEW = ".flattened";

/**
 * Snapshot disks as qcow2 images, each standing on the one below by a backing file: the
 * QEMU driver makes its overlays here (a boot's on the base image, a restore's and a fork's
 * on a frozen disk), and the orchestrator flattens chains here. Warren's records (meta.json's
 * `diskBacking`) are the chain; a header is only ever compared with them.
 */
export class Qcow2DiskChains implements DiskChains {
  /** Writes an empty overlay on `backing`, in process (createOverlay); returns its virtual size. */
  createOverlay(
    path: string,
    backing: Pick<ChainLayer, "file" | "format">,
    options: OverlayOptions = {},
  ): Promise<bigint> {
    return createOverlay(path, backing.file, backing.format, options);
  }

  /** The base image a cold boot stacks its overlay on, with its format (by file name). */
  baseLayer(path: string): ChainLayer {
    return { file: path, format: imageFormat(path) };
  }

  /** Virtual size of a disk image: a qcow2's header field, or a raw file's length. */
  virtualSize(path: string): Promise<bigint> {
    return virtualSize(path);
  }

  flatten(snapshotDir: string, ontoDir: string): Promise<FlattenPlan> {
    return prepareFlatten(snapshotDir, ontoDir);
  }

  finishFlatten(snapshotDir: string, recordedMetaSha256: string | undefined): Promise<boolean> {
    return finishFlatten(snapshotDir, recordedMetaSha256);
  }
}

/**
 * Prepares the replacement of `snapshotDir`'s frozen disk by one stacked directly on
 * `ontoDir`'s, holding every cluster the layers in between wrote, and of its meta.json by
 * one naming the new backing. Nothing is replaced until `commit()`: the caller records the
 * new files' checksums first, so a crash in between leaves either the old pair or (finished
 * by `finishFlatten` at the next start) the new one, each matching a record.
 *
 * `qemu-img rebase` (safe mode) does the copy. It follows backing names in qcow2 headers,
 * so first every header in the chain is checked against the chain Warren recorded: a
 * sibling snapshot's disk is named `../<sibling>/disk.qcow2` in both, which qemu-img takes
 * from the image's own directory, and the new backing is named so too. Because
 * `ontoDir`'s disk is in the old chain, it only compares the clusters allocated above it,
 * so the cost is what those layers wrote, not the disk's size. Lowest CPU priority: it is
 * background work.
 */
async function prepareFlatten(snapshotDir: string, ontoDir: string): Promise<FlattenPlan> {
  const disk = join(snapshotDir, DISK_FILE);
  const onto = join(ontoDir, DISK_FILE);
  const work = `${DISK_FILE}${NEW}`;
  const meta = `${META_FILE}${NEW}`;
  try {
    const chain = await readChain(snapshotDir);
    const target = chain.disk.find((layer, i) => i > 0 && layer.snapshotDir === resolve(ontoDir));
    if (!target) throw new VmmError(`${onto} is not below ${disk}`);
    for (let i = 0; i + 1 < chain.disk.length; i++) {
      const layer = chain.disk[i] as { file: string };
      const below = chain.disk[i + 1]?.record;
      const recorded = below && headerName(below);
      const header = await headerBacking(layer.file);
      if (header !== recorded)
        throw new VmmError(`${layer.file} names ${header ?? "no"} backing, recorded ${recorded}`);
    }
    const backing = backingRecord(chain.dir, target);
    await copyFile(disk, join(snapshotDir, work));
    // The new backing by its relative name: written as given into the header, and taken by
    // qemu-img from the image's directory.
    const args = ["-n", "19", "qemu-img", "rebase", "-q", "-f", "qcow2"];
    await run("nice", [...args, "-b", headerName(backing), "-F", "qcow2", join(snapshotDir, work)]);
    await writeSnapshotMeta(snapshotDir, { ...chain.meta, diskBacking: backing }, meta);
    const replaced = new Map<string, SealedFile>([
      [DISK_FILE, { ...(await sealFile(snapshotDir, work)), name: DISK_FILE }],
      [META_FILE, { ...(await sealFile(snapshotDir, meta)), name: META_FILE }],
    ]);
    const files: SnapshotFile[] = [];
    for (const name of (await readdir(snapshotDir)).sort()) {
      if (name.endsWith(NEW)) continue;
      files.push(replaced.get(name) ?? (await sealFile(snapshotDir, name)));
    }
    return {
      files,
      commit: async () => {
        // Disk first: on the old meta the flattened disk reads the same (it holds everything
        // the layers in between wrote, over the same parent); the reverse would not.
        await rename(join(snapshotDir, work), disk);
        await rename(join(snapshotDir, meta), join(snapshotDir, META_FILE));
      },
      discard: () => discardFlatten(snapshotDir),
    };
  } catch (err) {
    await discardFlatten(snapshotDir);
    const stderr = (err as { stderr?: string }).stderr?.trim();
    throw new VmmError(
      `flattening ${disk} onto ${onto} failed${stderr ? `: ${stderr}` : err instanceof VmmError ? `: ${err.message}` : ""}`,
      undefined,
      { cause: err },
    );
  }
}

async function discardFlatten(snapshotDir: string): Promise<void> {
  await rm(join(snapshotDir, `${DISK_FILE}${NEW}`), { force: true });
  await rm(join(snapshotDir, `${META_FILE}${NEW}`), { force: true });
}

/**
 * After a crash: a flatten of `snapshotDir` prepared but not committed is finished when the
 * catalog already records its files (`recordedMeta`: the meta.json checksum it holds), and
 * dropped otherwise. Returns whether it was finished.
 */
async function finishFlatten(
  snapshotDir: string,
  recordedMeta: string | undefined,
): Promise<boolean> {
  const names = await readdir(snapshotDir).catch(() => [] as string[]);
  if (!names.some((n) => n.endsWith(NEW))) return false;
  const both = names.includes(`${DISK_FILE}${NEW}`) && names.includes(`${META_FILE}${NEW}`);
  if (both && recordedMeta !== undefined) {
    const pending = await sealFile(snapshotDir, `${META_FILE}${NEW}`);
    if (pending.sha256 === recordedMeta) {
      await rename(join(snapshotDir, `${DISK_FILE}${NEW}`), join(snapshotDir, DISK_FILE));
      await rename(join(snapshotDir, `${META_FILE}${NEW}`), join(snapshotDir, META_FILE));
      return true;
    }
  }
  await discardFlatten(snapshotDir);
  return false;
}
