import { link, mkdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import type { ExitInfo, SnapshotTiming, Vm, VmSpec } from "../driver.js";
import { overlayNode } from "./args.js";
import { copySparse, dirtyPages, findRamMapping, writeMemoryDiff } from "./memory-image.js";
import type { Qcow2DiskChains } from "./qcow2-disk-chains.js";
import type { QemuProcess } from "./qemu-process.js";
import type { QmpClient } from "./qmp-client.js";
import { openPlainFile, type SnapshotVerifier, sealSnapshot } from "./sealed-files.js";
import { backingRecord, type ChainLayer, diskOf, fileRef, headerName } from "./snapshot-chain.js";
import {
  DEVICE_STATE_FILE,
  DISK_FILE,
  MEMORY_DIFF_FILE,
  MEMORY_FILE,
  type RestoreHost,
  SNAPSHOT_FORMAT_VERSION,
  type SnapshotFileRef,
  writeSnapshotMeta,
} from "./snapshot-meta.js";
import type { VmmIdentity } from "./vmm-ids.js";

/**
 * The file QEMU maps as guest RAM. Shared: the file is the RAM (boot VMs). Private: a
 * snapshot's image (`snapshotDir`: that snapshot's directory) mapped copy-on-write.
 */
export type VmMemory =
  | { readonly file: string; readonly shared: true }
  | { readonly file: string; readonly shared: false; readonly snapshotDir: string };

export interface QemuVmParts {
  readonly spec: VmSpec;
  readonly proc: QemuProcess;
  readonly qmp: QmpClient;
  readonly memory: VmMemory;
  /** The overlay QEMU writes the root disk to, and the image it is stacked on. */
  readonly rootDisk: string;
  readonly backing: ChainLayer;
  /** The root disk's virtual size: every overlay a fork capture puts on top has it too. */
  readonly diskBytes: bigint;
  /** Makes the fresh overlay a fork capture switches the VM to. */
  readonly disks: Qcow2DiskChains;
  readonly host: RestoreHost;
  /** The uid QEMU runs as (files handed to it are its), or none when it stays root. */
  readonly identity: VmmIdentity | undefined;
  readonly kernelCommandLine: string | undefined;
  /** The driver's: told what each capture sealed, so a restore here need not hash it. */
  readonly verifier: SnapshotVerifier;
}

/**
 * A running QEMU microVM: snapshots itself (pause or fork capture) and is destroyed.
 *
 * The runtime directory is the VMM's: anything in it may have been replaced by a QEMU its
 * guest took over. Files are moved out of it into the snapshot directory (root's) by rename,
 * which never follows a link, and only then opened, without following links, checked to be
 * plain files and sealed (sealed-files.ts).
 */
export class QemuVm implements Vm {
  readonly exited: Promise<ExitInfo>;
  #snapshots = 0;
  #rootNode = "root";

  readonly spec: VmSpec;
  readonly proc: QemuProcess;
  readonly qmp: QmpClient;
  readonly memory: VmMemory;
  readonly host: RestoreHost;
  readonly #disks: Qcow2DiskChains;
  readonly #diskBytes: bigint;
  readonly #verifier: SnapshotVerifier;
  readonly identity: VmmIdentity | undefined;
  /** What the guest booted with (a restore carries its snapshot's; older ones lack it). */
  readonly kernelCommandLine: string | undefined;
  private rootDisk: string;
  private backing: ChainLayer;

  constructor(parts: QemuVmParts) {
    ({
      spec: this.spec,
      proc: this.proc,
      qmp: this.qmp,
      memory: this.memory,
      host: this.host,
      identity: this.identity,
      kernelCommandLine: this.kernelCommandLine,
      rootDisk: this.rootDisk,
      backing: this.backing,
      disks: this.#disks,
      diskBytes: this.#diskBytes,
      verifier: this.#verifier,
    } = parts);
    this.exited = this.proc.exited;
  }

  get id(): string {
    return this.spec.id;
  }

  get pid(): number {
    return this.proc.pid;
  }

  consoleTail(): string {
    return this.proc.console.text();
  }

  async snapshot(
    dir: string,
    opts: { resume: boolean; keepStopped?: boolean },
  ): Promise<SnapshotTiming> {
    // A restored VM's RAM stays the base image it maps, so staying costs nothing; a booted
    // one's is its own file, which a capture it outlives must copy.
    const stay = !opts.resume && opts.keepStopped === true && !this.memory.shared;
    // What the capture stands on, by name: refused here, before the guest stops, unless
    // those snapshots lie beside `dir`.
    const diskBacking = backingRecord(dir, this.backing);
    const memoryImage: SnapshotFileRef = this.memory.shared
      ? fileRef(dir, dir, join(dir, MEMORY_FILE))
      : fileRef(dir, this.memory.snapshotDir, this.memory.file);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const started = performance.now();
    await this.qmp.execute("stop");
    let resumed = false;
    try {
      // Written where QEMU (jailed, unprivileged) may write, then moved into the snapshot.
      const deviceState = join(this.spec.runtimeDir, DEVICE_STATE_FILE);
      // live: without it a stopped VM's disks are inactivated (made ready for another QEMU to
      // take over), which an unprivileged QEMU cannot do and which we never need.
      await this.qmp.execute("xen-save-devices-state", { filename: deviceState, live: true });
      await rename(deviceState, join(dir, DEVICE_STATE_FILE));
      const deviceStateMs = performance.now() - started;

      let memory: { image: string; diffPages: number };
      let memoryMs: number;
      let diskMs: number;
      const timed = async <T>(fn: () => Promise<T>): Promise<[T, number]> => {
        const t = performance.now();
        return [await fn(), performance.now() - t];
      };
      if (opts.resume || stay) {
        // Disk first: switching overlays syncs the old one, and a sync after the diff is
        // written would wait for the diff's pages to reach the disk too (ext4 ordered mode).
        [, diskMs] = await timed(() => this.#freezeDisk(dir));
        [memory, memoryMs] = await timed(() => this.#captureMemory(dir, true));
        if (opts.resume) {
          await this.qmp.execute("cont");
          resumed = true;
        }
      } else {
        [memory, memoryMs] = await timed(() => this.#captureMemory(dir, false));
        [, diskMs] = await timed(async () => {
          // A boot VM maps its RAM file shared: it must be gone before that file is sealed.
          // A restored one's SIGKILL is enough (it runs no code of its own after it).
          const gone = this.#quit();
          if (this.memory.shared) await gone;
          await rename(this.rootDisk, join(dir, DISK_FILE));
          if (this.memory.shared) await rename(this.memory.file, memory.image);
        });
      }
      const pausedMs = performance.now() - started;
      await writeSnapshotMeta(dir, {
        formatVersion: SNAPSHOT_FORMAT_VERSION,
        accel: this.host.accel,
        cpuModel: this.host.cpuModel,
        qemuVersion: this.host.qemuVersion,
        kernel: this.host.kernel,
        images: this.host.images,
        kernelCommandLine: this.kernelCommandLine,
        shape: this.spec.shape,
        memoryImage,
        memoryDiff: memory.diffPages > 0 ? MEMORY_DIFF_FILE : undefined,
        diffPages: memory.diffPages,
        deviceStateFile: DEVICE_STATE_FILE,
        diskFile: DISK_FILE,
        diskBacking,
        createdAt: new Date().toISOString(),
      });
      // A frozen disk under a VMM that stays (fork, kept pause) keeps its second name (the
      // VMM's old overlay) until the VM is gone; sealed all the same, QEMU holds it read-only.
      const frozenLinks: Record<string, number> = opts.resume || stay ? { [DISK_FILE]: 2 } : {};
      this.#verifier.sealed(dir, await sealSnapshot(dir, frozenLinks));
      const dirtyPages = memory.diffPages;
      return { pausedMs, deviceStateMs, memoryMs, diskMs, dirtyPages, keptStopped: stay };
    } catch (err) {
      // The sandbox goes on running when its capture fails: its guest must not stay frozen.
      if (!resumed && this.proc.running) await this.qmp.execute("cont").catch(() => {});
      throw err;
    }
  }

  async continue(): Promise<void> {
    await this.qmp.execute("cont");
  }

  /**
   * Restored VM: the image it maps stays the base and only the pages changed since go into
   * a diff. Boot VM: its RAM file is the image (moved once QEMU is gone, or copied now when
   * the VM keeps running).
   */
  async #captureMemory(
    dir: string,
    resume: boolean,
  ): Promise<{ image: string; diffPages: number }> {
    if (this.memory.shared) {
      const image = join(dir, MEMORY_FILE);
      if (resume) await copySparse(this.memory.file, image);
      return { image, diffPages: 0 };
    }
    const ramBytes = this.spec.shape.memoryMiB * 1024 * 1024;
    const mapping = await findRamMapping(this.pid, this.memory.file, ramBytes);
    const pages = await dirtyPages(this.pid, mapping, ramBytes);
    if (pages.length > 0) writeMemoryDiff(this.pid, mapping, pages, join(dir, MEMORY_DIFF_FILE));
    return { image: this.memory.file, diffPages: pages.length };
  }

  /**
   * Freezes the current overlay into the snapshot (a hard link) and switches QEMU to a fresh
   * one on top, given the frozen one explicitly as its backing (no header is read). The
   * overlays' file nodes are auto-read-only: once the frozen one has no writer QEMU reopens
   * it read-only, so the running VMM can no longer write a disk its fork children stand on.
   *
   * The overlay's name is the VMM's, which may have put anything there: the link is checked
   * to be a plain file (opened without following a link or waiting on a FIFO), and the new
   * overlay takes the VM's disk size, not a size read from the VMM's header. The frozen
   * disk's header is checked when the snapshot is sealed.
   */
  async #freezeDisk(dir: string): Promise<void> {
    const frozen = join(dir, DISK_FILE);
    const next = join(this.spec.runtimeDir, `disk-${++this.#snapshots}.qcow2`);
    const nextNode = `root-${this.#snapshots}`;
    await link(this.rootDisk, frozen);
    await (await openPlainFile(frozen, 2)).close();
    await this.#disks.createOverlay(
      next,
      { file: frozen, format: "qcow2" },
      {
        owner: this.identity,
        backingName: headerName(diskOf(dir)),
        backingSize: this.#diskBytes,
      },
    );
    await this.qmp.execute("blockdev-add", overlayNode(nextNode, next, null));
    await this.qmp.execute("blockdev-snapshot", { node: this.#rootNode, overlay: nextNode });
    this.#rootNode = nextNode;
    this.rootDisk = next;
    this.backing = { file: frozen, format: "qcow2", snapshotDir: dir };
  }

  async destroy(): Promise<void> {
    this.qmp.close();
    await this.proc.kill();
    await rm(this.spec.runtimeDir, { recursive: true, force: true });
  }

  /**
   * Ends a stopped VMM. `stop` already drained and flushed every block device, so the
   * overlay is consistent on disk, and a boot VM's RAM file lives in the page cache: a
   * SIGKILL loses nothing and skips QEMU's slow orderly teardown. Returns once it exited.
   */
  #quit(): Promise<ExitInfo> {
    this.qmp.close();
    return this.proc.kill();
  }
}
