import { constants } from "node:fs";
import { copyFile, open, readdir, rename, rm } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { DiskChains, FlattenPlan } from "../disk-chains.js";
import type { SnapshotFile } from "../driver.js";
import { VmmError } from "../errors.js";
import { type OpenLayer, streamDisk } from "./disk-stream.js";
import { awaitNoWriters } from "./file-writers.js";
import { readQcow2Header } from "./qcow2-header.js";
import {
  createOverlay,
  headerBacking,
  imageFormat,
  type OverlayOptions,
  openImage,
  virtualSize,
} from "./qcow2-overlay.js";
import { type SealedFile, sealFile } from "./sealed-files.js";
import {
  backingRecord,
  type ChainLayer,
  type ChainPolicy,
  headerName,
  readChain,
  type SnapshotChain,
} from "./snapshot-chain.js";
import { DISK_FILE, META_FILE, writeSnapshotMeta } from "./snapshot-meta.js";
import type { VmmIdentities } from "./vmm-ids.js";

const NEW = ".flattened";

export interface Qcow2DiskChainsOptions extends ChainPolicy {
  /** Uids for the QEMU that copies a flatten's clusters: it never runs as root. */
  readonly identities: VmmIdentities;
}

/**
 * Snapshot disks as qcow2 images, each standing on the one below by a backing file: the
 * QEMU driver makes its overlays here (a boot's on the base image, a restore's and a fork's
 * on a frozen disk), reads snapshots' chains and checks their layers here before QEMU opens
 * them, and the orchestrator flattens chains here. Warren's records (meta.json's
 * `diskBacking`) are the chain; a header is only ever compared with them. Every layer but
 * the guest images was a VMM's overlay: it is opened without following links or waiting,
 * its header checked (qcow2-header.ts), and used only once no process can write it.
 */
export class Qcow2DiskChains implements DiskChains {
  readonly #options: Qcow2DiskChainsOptions;

  constructor(options: Qcow2DiskChainsOptions) {
    this.#options = options;
  }

  /** A snapshot's records and all it stands on, ending on an image of the images directory. */
  readChain(snapshotDir: string): Promise<SnapshotChain> {
    return readChain(snapshotDir, this.#options);
  }

  /**
   * Writes an empty overlay on `backing`, in process (createOverlay); returns its virtual
   * size. A snapshot's disk is read as a layer is (checked header, no link followed).
   */
  async createOverlay(
    path: string,
    backing: Pick<ChainLayer, "file" | "format" | "snapshotDir">,
    options: OverlayOptions = {},
  ): Promise<bigint> {
    const backingSize =
      options.backingSize ?? (await virtualSize(backing.file, backing.snapshotDir === undefined));
    return createOverlay(path, backing.file, backing.format, { ...options, backingSize });
  }

  /** The base image a cold boot stacks its overlay on, with its format (by file name). */
  baseLayer(path: string): ChainLayer {
    return { file: path, format: imageFormat(path) };
  }

  /** Virtual size of a guest image: a qcow2's header field, or a raw file's length. */
  virtualSize(path: string): Promise<bigint> {
    return virtualSize(path, true);
  }

  /**
   * Checks every layer of a chain (readChain's `disk`) before QEMU opens it, while still
   * root: a plain file, open for writing by no one (so what is checked is what QEMU reads),
   * its header holding nothing but Warren's disks hold.
   */
  async checkLayers(layers: readonly ChainLayer[]): Promise<void> {
    const opened = await openLayers(layers, false);
    await Promise.all(opened.map((layer) => layer.handle.close()));
  }

  flatten(snapshotDir: string, ontoDir: string): Promise<FlattenPlan> {
    return prepareFlatten(snapshotDir, ontoDir, this.#options);
  }

  finishFlatten(snapshotDir: string, recordedMetaSha256: string | undefined): Promise<boolean> {
    return finishFlatten(snapshotDir, recordedMetaSha256);
  }
}

/**
 * Opens a chain's layers read-only and checks them (see checkLayers); `compareNames`: each
 * header's backing name must also be the one Warren's records give the layer below.
 */
async function openLayers(
  layers: readonly ChainLayer[],
  compareNames: boolean,
): Promise<OpenLayer[]> {
  const opened: OpenLayer[] = [];
  try {
    for (let i = 0; i < layers.length; i++) {
      const layer = layers[i] as ChainLayer;
      // Guest images are the server's, named by its configuration; the rest were VMMs'.
      const handle = await openImage(layer.file, layer.snapshotDir === undefined);
      opened.push({ handle, format: layer.format });
      if (layer.format !== "qcow2") continue;
      if (layer.snapshotDir !== undefined) await awaitNoWriters(handle, layer.file);
      const header = await readQcow2Header(handle, layer.file);
      const below = layers[i + 1]?.record;
      const recorded = below && headerName(below);
      if (compareNames && header.backingName !== recorded)
        throw new VmmError(
          `${layer.file} names ${header.backingName ?? "no"} backing, recorded ${recorded}`,
        );
    }
    return opened;
  } catch (err) {
    await Promise.all(opened.map((layer) => layer.handle.close()));
    throw err;
  }
}

/**
 * Prepares the replacement of `snapshotDir`'s frozen disk by one stacked directly on
 * `ontoDir`'s, holding every cluster the layers in between wrote, and of its meta.json by
 * one naming the new backing. Nothing is replaced until `commit()`: the caller records the
 * new files' checksums first, so a crash in between leaves either the old pair or (finished
 * by `finishFlatten` at the next start) the new one, each matching a record.
 *
 * Every layer is checked first (checkLayers, and each header's backing name against the
 * records), then a copy of the disk is restacked by QEMU's block-stream in a QEMU that is
 * never root (streamDisk: a VMM uid, the images handed over as descriptors, the chain as
 * explicit nodes). Because `ontoDir`'s disk is in the old chain, only the clusters allocated
 * above it are copied, so the cost is what those layers wrote, not the disk's size. The new
 * backing is named `../<onto>/disk.qcow2`, taken from the image's own directory. Lowest CPU
 * priority: it is background work.
 */
async function prepareFlatten(
  snapshotDir: string,
  ontoDir: string,
  options: Qcow2DiskChainsOptions,
): Promise<FlattenPlan> {
  const disk = join(snapshotDir, DISK_FILE);
  const onto = join(ontoDir, DISK_FILE);
  const work = `${DISK_FILE}${NEW}`;
  const meta = `${META_FILE}${NEW}`;
  try {
    const chain = await readChain(snapshotDir, options);
    const base = chain.disk.findIndex(
      (layer, i) => i > 0 && layer.snapshotDir === resolve(ontoDir),
    );
    const target = chain.disk[base];
    if (!target) throw new VmmError(`${onto} is not below ${disk}`);
    const backing = backingRecord(chain.dir, target);
    const layers = await openLayers(chain.disk, true);
    try {
      await copyFile(disk, join(snapshotDir, work));
      const top = await open(join(snapshotDir, work), constants.O_RDWR | constants.O_NOFOLLOW);
      const identity = options.identities.take();
      try {
        await streamDisk({
          layers: [{ handle: top, format: "qcow2" }, ...layers.slice(1)],
          base,
          backingName: headerName(backing),
          identity,
        });
      } finally {
        options.identities.give(identity);
        await top.close();
      }
    } finally {
      await Promise.all(layers.map((layer) => layer.handle.close()));
    }
    const written = await headerBacking(join(snapshotDir, work));
    if (written !== headerName(backing))
      throw new VmmError(`the flattened disk names ${written} backing, not ${headerName(backing)}`);
    await writeSnapshotMeta(snapshotDir, { ...chain.meta, diskBacking: backing }, meta);
    const replaced = new Map<string, SealedFile>([
      [DISK_FILE, { ...(await sealFile(snapshotDir, work, { qcow2: true })), name: DISK_FILE }],
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
    throw new VmmError(
      `flattening ${disk} onto ${onto} failed: ${(err as Error).message}`,
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
