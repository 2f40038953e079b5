import { link, mkdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import type { ExitInfo, SnapshotTiming, Vm, VmSpec } from "../driver.js";
import { QmpError, VmmError } from "../errors.js";
import { overlayNode } from "./args.js";
import { GuestConsole } from "./console.js";
import { copySparse, dirtyPages, findRamMapping, writeMemoryDiff } from "./memory-image.js";
import type { Qcow2DiskChains } from "./qcow2-disk-chains.js";
import { lastLines } from "./qemu-process.js";
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
import { captureOverlay, VM_RECORD_VERSION, type VmRecord } from "./vm-record.js";
import type { VmmIdentity } from "./vmm-ids.js";
import { processCpuMs, type VmmProcess } from "./vmm-process.js";

/**
 * The file QEMU maps as guest RAM. Shared: the file is the RAM (boot VMs). Private: a
 * snapshot's image (`snapshotDir`: that snapshot's directory) mapped copy-on-write.
 */
export type VmMemory =
  | { readonly file: string; readonly shared: true }
  | { readonly file: string; readonly shared: false; readonly snapshotDir: string };

export interface QemuVmParts {
  readonly spec: VmSpec;
  readonly proc: VmmProcess;
  /** When the process started (see VmRecord.startTime). */
  readonly startTime: number;
  readonly qmp: QmpClient;
  readonly qmpSocket: string;
  readonly memory: VmMemory;
  /** The overlay QEMU writes the root disk to, and the image it is stacked on. */
  readonly rootDisk: string;
  readonly backing: ChainLayer;
  /** The root disk's block node and the fork captures so far (a reattached VM's; else none). */
  readonly rootNode?: string;
  readonly captures?: number;
  /** The root disk's virtual size: every overlay a fork capture puts on top has it too. */
  readonly diskBytes: bigint;
  /** Makes the fresh overlay a fork capture switches the VM to. */
  readonly disks: Qcow2DiskChains;
  readonly host: RestoreHost;
  /** The uid QEMU runs as (files handed to it are its), or none when it stays root. */
  readonly identity: VmmIdentity | undefined;
  readonly kernelCommandLine: string | undefined;
  /** Whether QEMU runs in a cgroup of the driver's (named by the VM id). */
  readonly cgroup: boolean;
  /** The driver's: told what each capture sealed, so a restore here need not hash it. */
  readonly verifier: SnapshotVerifier;
  /**
   * Told the record each time a fork capture is about to switch the root disk and once it
   * did (QemuDriverOptions.recordChanged); a failure stops the capture before the switch.
   */
  readonly recordChanged?: (record: VmRecord) => Promise<void>;
  /** Told once `detach()` let go of the VM. */
  readonly detached?: () => void;
}

/**
 * A running QEMU microVM: snapshots itself (pause or fork capture) and is destroyed.
 *
 * The runtime directory is the VMM's: anything in it may have been replaced by a QEMU its
 * guest took over. Files are moved out of it into the snapshot directory (root's) by rename,
 * which never follows a link, and only then opened, without following links, checked to be
 * plain files and sealed (sealed-files.ts).
 *
 * Everything it knows is in its record (`record()`): `detach()` lets go of a VM that goes on
 * running, and `QemuDriver.reattach()` makes a QemuVm of it again, in this server or the next.
 */
export class QemuVm implements Vm {
  readonly exited: Promise<ExitInfo>;
  /** Fork captures so far: each switched (or tried) to overlay `disk-<n>`, node `root-<n>`. */
  #captures: number;
  #rootNode: string;
  /** The capture switching the root disk right now, recorded before QEMU is asked to. */
  #pendingCapture: { readonly dir: string } | undefined;
  #detached = false;

  readonly spec: VmSpec;
  readonly proc: VmmProcess;
  readonly qmp: QmpClient;
  readonly console: GuestConsole;
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
  readonly #startTime: number;
  readonly #qmpSocket: string;
  readonly #cgroup: boolean;
  readonly #recordChanged: QemuVmParts["recordChanged"];
  readonly #onDetach: QemuVmParts["detached"];

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
      startTime: this.#startTime,
      qmpSocket: this.#qmpSocket,
      cgroup: this.#cgroup,
      recordChanged: this.#recordChanged,
      detached: this.#onDetach,
    } = parts);
    this.#rootNode = parts.rootNode ?? "root";
    this.#captures = parts.captures ?? 0;
    this.console = new GuestConsole(this.qmp);
    // A crash report ends with what the guest printed last (drained every few seconds).
    this.exited = this.proc.exited.then((exit) => {
      this.console.stop();
      const printed = this.console.lastText().trim();
      if (exit.expected || !printed) return exit;
      return { ...exit, reason: `${exit.reason}\nconsole:\n${lastLines(printed)}` };
    });
  }

  get id(): string {
    return this.spec.id;
  }

  get pid(): number {
    return this.proc.pid;
  }

  cpuTimeMs(): Promise<number | undefined> {
    return processCpuMs(this.pid);
  }

  consoleTail(): Promise<string> {
    return this.#detached ? Promise.resolve(this.console.lastText()) : this.console.text();
  }

  /** What `QemuDriver.reattach` needs to make this VM again once this object is gone. */
  record(): VmRecord {
    const { file, format, snapshotDir } = this.backing;
    return {
      version: VM_RECORD_VERSION,
      spec: this.spec,
      pid: this.pid,
      startTime: this.#startTime,
      qmpSocket: this.#qmpSocket,
      memory: this.memory,
      rootDisk: this.rootDisk,
      rootNode: this.#rootNode,
      backing: snapshotDir === undefined ? { file, format } : { file, format, snapshotDir },
      captures: this.#captures,
      diskBytes: this.#diskBytes.toString(),
      kernelCommandLine: this.kernelCommandLine,
      host: this.host,
      identity: this.identity,
      cgroup: this.#cgroup,
      pendingCapture: this.#pendingCapture,
    };
  }

  /**
   * Lets go of the VM, which goes on running: closes QMP (a VMM has one monitor connection;
   * the next owner takes it) and forgets the process. Everything after this is refused;
   * `record()` still answers, for `QemuDriver.reattach`.
   */
  detach(): void {
    if (this.#detached) return;
    this.#detached = true;
    this.console.stop();
    this.qmp.close();
    this.#onDetach?.();
  }

  #attached(): void {
    if (this.#detached) throw new VmmError("the VM was detached (handed over)", this.id);
  }

  async snapshot(
    dir: string,
    opts: { resume: boolean; keepStopped?: boolean },
  ): Promise<SnapshotTiming> {
    this.#attached();
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
    this.#attached();
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
    // Numbered before anything is tried: a failed attempt's node name stays taken in QEMU.
    const { file: next, node: nextNode } = captureOverlay(this.spec.runtimeDir, ++this.#captures);
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
    // Intent, then commit: a record saved in between says a switch may have happened, and a
    // reattach asks QEMU which root node it has (reattach.ts) instead of guessing.
    this.#pendingCapture = { dir };
    let switching = false;
    try {
      await this.#recordChanged?.(this.record());
      await this.qmp.execute("blockdev-add", overlayNode(nextNode, next, null));
      switching = true;
      await this.qmp.execute("blockdev-snapshot", { node: this.#rootNode, overlay: nextNode });
    } catch (err) {
      // Only a switch asked for and never answered is open; otherwise nothing changed (a
      // saved intent is settled by asking QEMU, should it come to a reattach).
      if (!switching || err instanceof QmpError) this.#pendingCapture = undefined;
      throw err;
    }
    this.#pendingCapture = undefined;
    this.#rootNode = nextNode;
    this.rootDisk = next;
    this.backing = { file: frozen, format: "qcow2", snapshotDir: dir };
    await this.#recordChanged?.(this.record());
  }

  async destroy(): Promise<void> {
    this.#attached();
    this.console.stop();
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
