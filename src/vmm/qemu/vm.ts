import { chown, link, mkdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import type { ExitInfo, SnapshotTiming, Vm, VmSpec } from "../driver.js";
import { copySparse, dirtyPages, findRamMapping, writeMemoryDiff } from "./memory-image.js";
import { createOverlay } from "./qcow2-overlay.js";
import type { QemuProcess } from "./qemu-process.js";
import type { QmpClient } from "./qmp-client.js";
import {
  DEVICE_STATE_FILE,
  DISK_FILE,
  MEMORY_DIFF_FILE,
  MEMORY_FILE,
  type RestoreHost,
  SNAPSHOT_FORMAT_VERSION,
  writeSnapshotMeta,
} from "./snapshot-meta.js";

export interface VmmUser {
  readonly name: string;
  readonly uid: number;
  readonly gid: number;
}

export interface VmMemory {
  /** The file QEMU maps as guest RAM. */
  readonly file: string;
  /** Shared: the file is the RAM (boot VMs). Private: a snapshot image mapped copy-on-write. */
  readonly shared: boolean;
}

export interface QemuVmParts {
  readonly spec: VmSpec;
  readonly proc: QemuProcess;
  readonly qmp: QmpClient;
  readonly memory: VmMemory;
  /** The overlay QEMU writes the root disk to. */
  readonly rootDisk: string;
  readonly host: RestoreHost;
  readonly runAs: VmmUser | undefined;
  readonly kernelCommandLine: string | undefined;
}

/** A running QEMU microVM: snapshots itself (pause or fork capture) and is destroyed. */
export class QemuVm implements Vm {
  readonly exited: Promise<ExitInfo>;
  #snapshots = 0;

  readonly spec: VmSpec;
  readonly proc: QemuProcess;
  readonly qmp: QmpClient;
  readonly memory: VmMemory;
  readonly host: RestoreHost;
  readonly runAs: VmmUser | undefined;
  /** What the guest booted with (a restore carries its snapshot's; older ones lack it). */
  readonly kernelCommandLine: string | undefined;
  private rootDisk: string;

  constructor(parts: QemuVmParts) {
    ({
      spec: this.spec,
      proc: this.proc,
      qmp: this.qmp,
      memory: this.memory,
      host: this.host,
      runAs: this.runAs,
      kernelCommandLine: this.kernelCommandLine,
      rootDisk: this.rootDisk,
    } = parts);
    this.exited = this.proc.exited;
  }

  get id(): string {
    return this.spec.id;
  }

  get pid(): number {
    return this.proc.pid;
  }

  get consoleLog(): string {
    return this.proc.consoleLog;
  }

  async snapshot(dir: string, opts: { resume: boolean }): Promise<SnapshotTiming> {
    await mkdir(dir, { recursive: true });
    const started = performance.now();
    await this.qmp.execute("stop");
    let resumed = false;
    try {
      // Written where QEMU (maybe unprivileged) may write, then moved into the snapshot.
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
      if (opts.resume) {
        // Disk first: switching overlays syncs the old one, and a sync after the diff is
        // written would wait for the diff's pages to reach the disk too (ext4 ordered mode).
        [, diskMs] = await timed(() => this.#freezeDisk(dir));
        [memory, memoryMs] = await timed(() => this.#captureMemory(dir, true));
        await this.qmp.execute("cont");
        resumed = true;
      } else {
        [memory, memoryMs] = await timed(() => this.#captureMemory(dir, false));
        [, diskMs] = await timed(async () => {
          this.#quit();
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
        memoryImage: memory.image,
        memoryDiff: memory.diffPages > 0 ? MEMORY_DIFF_FILE : undefined,
        diffPages: memory.diffPages,
        deviceStateFile: DEVICE_STATE_FILE,
        diskFile: DISK_FILE,
        createdAt: new Date().toISOString(),
      });
      return { pausedMs, deviceStateMs, memoryMs, diskMs, dirtyPages: memory.diffPages };
    } catch (err) {
      if (opts.resume && !resumed && this.proc.running) {
        await this.qmp.execute("cont").catch(() => {});
      }
      throw err;
    }
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
    const mapping = await findRamMapping(this.pid, this.memory.file);
    const pages = await dirtyPages(this.pid, mapping);
    if (pages.length > 0) writeMemoryDiff(this.pid, mapping, pages, join(dir, MEMORY_DIFF_FILE));
    return { image: this.memory.file, diffPages: pages.length };
  }

  /**
   * Freezes the current overlay into the snapshot (a hard link) and switches QEMU to a fresh
   * one on top. The new one's header names the snapshot's link as backing, so the chain
   * stays whole after this VM's runtime directory is gone.
   */
  async #freezeDisk(dir: string): Promise<void> {
    const frozen = join(dir, DISK_FILE);
    const next = join(this.spec.runtimeDir, `disk-${++this.#snapshots}.qcow2`);
    await link(this.rootDisk, frozen);
    await createOverlay(next, frozen, "qcow2");
    if (this.runAs) await chown(next, this.runAs.uid, this.runAs.gid);
    await this.qmp.execute("blockdev-snapshot-sync", {
      device: "root",
      "snapshot-file": next,
      format: "qcow2",
      mode: "existing",
    });
    this.rootDisk = next;
  }

  async destroy(): Promise<void> {
    this.qmp.close();
    await this.proc.kill();
    await rm(this.spec.runtimeDir, { recursive: true, force: true });
  }

  /**
   * Ends a stopped VMM. `stop` already drained and flushed every block device, so the
   * overlay is consistent on disk, and a boot VM's RAM file lives in the page cache: a
   * SIGKILL loses nothing and skips QEMU's slow orderly teardown.
   */
  #quit(): void {
    this.qmp.close();
    // Not awaited: the capture is complete; the process's teardown is off the critical path.
    void this.proc.kill();
  }
}
