import { execFile } from "node:child_process";
import { copyFile, readdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import type { FlattenPlan, SnapshotFile } from "../driver.js";
import { VmmError } from "../errors.js";
import { headerBacking } from "./qcow2-overlay.js";
import { type SealedFile, sealFile } from "./sealed-files.js";
import {
  DISK_FILE,
  diskChain,
  META_FILE,
  readSnapshotMeta,
  writeSnapshotMeta,
} from "./snapshot-meta.js";

const run = promisify(execFile);
const NEW = ".flattened";

/**
 * Prepares the replacement of `snapshotDir`'s frozen disk by one stacked directly on
 * `ontoDir`'s, holding every cluster the layers in between wrote, and of its meta.json by
 * one naming the new backing. Nothing is replaced until `commit()`: the caller records the
 * new files' checksums first, so a crash in between leaves either the old pair or (finished
 * by `finishFlatten` at the next start) the new one, each matching a record.
 *
 * `qemu-img rebase` (safe mode) does the copy. It follows backing names in qcow2 headers,
 * so first every header in the chain is checked against the chain Warren recorded. Because
 * `ontoDir`'s disk is in the old chain, it only compares the clusters allocated above it,
 * so the cost is what those layers wrote, not the disk's size. Lowest CPU priority: it is
 * background work.
 */
export async function prepareFlatten(snapshotDir: string, ontoDir: string): Promise<FlattenPlan> {
  const disk = join(snapshotDir, DISK_FILE);
  const onto = join(ontoDir, DISK_FILE);
  const work = `${DISK_FILE}${NEW}`;
  const meta = `${META_FILE}${NEW}`;
  try {
    const chain = await diskChain(snapshotDir);
    if (!chain.some((layer) => layer.file === onto))
      throw new VmmError(`${onto} is not below ${disk}`);
    for (let i = 0; i + 1 < chain.length; i++) {
      const layer = chain[i] as { file: string };
      const recorded = (chain[i + 1] as { file: string }).file;
      const header = await headerBacking(layer.file);
      if (header !== recorded)
        throw new VmmError(`${layer.file} names ${header ?? "no"} backing, recorded ${recorded}`);
    }
    await copyFile(disk, join(snapshotDir, work));
    const args = ["-n", "19", "qemu-img", "rebase", "-q", "-f", "qcow2"];
    await run("nice", [...args, "-b", onto, "-F", "qcow2", join(snapshotDir, work)]);
    const old = await readSnapshotMeta(snapshotDir);
    await writeSnapshotMeta(
      snapshotDir,
      { ...old, diskBacking: { file: onto, format: "qcow2", snapshotDir: ontoDir } },
      meta,
    );
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
export async function finishFlatten(
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
