import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { chown, link, mkdir, readFile, rename, rm } from "node:fs/promises";
import { connect } from "node:net";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import type { Accelerator, ExitInfo, SnapshotTiming, Vm, VmmDriver, VmSpec } from "../driver.js";
import { VmmError } from "../errors.js";
import { cpuModel, qemuArgs } from "./args.js";
import { hostTscKhz } from "./host-tsc.js";
import {
  applyMemoryDiff,
  copySparse,
  dirtyPages,
  findRamMapping,
  writeMemoryDiff,
} from "./memory-image.js";
import { createOverlay, imageFormat } from "./qcow2-overlay.js";
import { QEMU_BINARY, QemuProcess } from "./qemu-process.js";
import { QmpClient } from "./qmp-client.js";
import {
  checkRestorable,
  DEVICE_STATE_FILE,
  DISK_FILE,
  MEMORY_DIFF_FILE,
  MEMORY_FILE,
  type RestoreHost,
  readSnapshotMeta,
  SNAPSHOT_FORMAT_VERSION,
  writeSnapshotMeta,
} from "./snapshot-meta.js";

const run = promisify(execFile);

export interface QemuDriverOptions {
  readonly accel: Accelerator;
  /** `qemu-system-x86_64 --version`'s first line; recorded in snapshots. */
  readonly qemuVersion: string;
  /** TSC rate given to TCG guests; default: the host's (hostTscKhz). */
  readonly tscKhz?: number;
  /**
   * Unprivileged account QEMU switches to once it has opened its devices and files
   * (`-runas`); its runtime directory is handed to it. Default: QEMU stays root.
   */
  readonly runAs?: VmmUser;
}

export interface VmmUser {
  readonly name: string;
  readonly uid: number;
  readonly gid: number;
}

export async function qemuVersion(): Promise<string> {
  const { stdout } = await run(QEMU_BINARY, ["--version"]);
  return stdout.split("\n")[0]?.trim() ?? "unknown";
}

interface VmMemory {
  /** The file QEMU maps as guest RAM. */
  readonly file: string;
  /** Shared: the file is the RAM (boot VMs). Private: a snapshot image mapped copy-on-write. */
  readonly shared: boolean;
}

async function waitForSocket(path: string, proc: QemuProcess, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!existsSync(path)) {
    if (!proc.running) {
      const exit = await proc.exited;
      throw new VmmError(exit.reason, proc.vmId);
    }
    if (Date.now() > deadline)
      throw new VmmError(`QMP socket did not appear within ${timeoutMs} ms`, proc.vmId);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

function runtimePaths(spec: VmSpec) {
  return {
    qmpSocket: join(spec.runtimeDir, "qmp.sock"),
    migrateSocket: join(spec.runtimeDir, "migrate.sock"),
    consoleLog: join(spec.runtimeDir, "console.log"),
    overlay: join(spec.runtimeDir, "disk.qcow2"),
    memory: join(spec.runtimeDir, "memory.img"),
  };
}

/** The socket file appears at bind(), a moment before QEMU listens: retry refused connects. */
async function connectQmp(path: string, proc: QemuProcess, timeoutMs = 10_000): Promise<QmpClient> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await QmpClient.connect(path, proc.vmId);
    } catch (err) {
      const refused = (err as { cause?: NodeJS.ErrnoException }).cause?.code === "ECONNREFUSED";
      if (!refused || !proc.running || Date.now() > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
  }
}

/**
 * The error to report for a failure while QEMU starts or restores: when QEMU died (a broken
 * QMP connection usually means so; its exit may land a moment later), its own reason.
 */
async function explainFailure(proc: QemuProcess, err: unknown): Promise<unknown> {
  const died = await Promise.race([
    proc.exited.then((exit) => !exit.expected),
    new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 500)),
  ]);
  return died ? new VmmError((await proc.exited).reason, proc.vmId, { cause: err }) : err;
}

/** Starts QEMU and its QMP connection; on any failure kills QEMU and removes the runtime dir. */
async function launch(
  spec: VmSpec,
  args: string[],
  consoleLog: string,
  qmpSocket: string,
): Promise<{ proc: QemuProcess; qmp: QmpClient }> {
  const proc = new QemuProcess(spec.id, args, spec.network, consoleLog);
  try {
    await waitForSocket(qmpSocket, proc);
    const qmp = await connectQmp(qmpSocket, proc);
    return { proc, qmp };
  } catch (err) {
    const reported = await explainFailure(proc, err);
    await proc.kill();
    await rm(spec.runtimeDir, { recursive: true, force: true });
    throw reported;
  }
}

/** A VM restored up to the point of loading its device state: the warm pool's unit. */
export interface PreparedRestore {
  readonly pid: number;
  /** Loads the device state and resumes the guest. */
  start(): Promise<Vm>;
  /** Gives the VMM up without starting it. */
  discard(): Promise<void>;
}

export class QemuDriver implements VmmDriver {
  readonly accel: Accelerator;
  readonly #host: RestoreHost;
  readonly #tscKhz: number | undefined;
  readonly #runAs: VmmUser | undefined;

  constructor(options: QemuDriverOptions) {
    this.accel = options.accel;
    this.#tscKhz = options.tscKhz ?? hostTscKhz();
    this.#runAs = options.runAs;
    this.#host = {
      accel: options.accel,
      cpuModel: cpuModel(options.accel),
      qemuVersion: options.qemuVersion,
      kernel: "",
      images: "",
    };
  }

  #hostFor(spec: VmSpec): RestoreHost {
    return { ...this.#host, kernel: spec.images.kernelVersion, images: spec.images.fingerprint };
  }

  /** The VM's runtime directory, owned by the account QEMU runs as (it creates sockets there). */
  async #makeRuntimeDir(spec: VmSpec): Promise<void> {
    // Parents stay traversable (0755) for the unprivileged QEMU; only the leaf is private.
    await mkdir(dirname(spec.runtimeDir), { recursive: true });
    await mkdir(spec.runtimeDir, { recursive: true, mode: 0o700 });
    await this.#giveToVmm(spec.runtimeDir);
  }

  /** Files QEMU may reopen after dropping root (its writable overlays) belong to its account. */
  async #giveToVmm(path: string): Promise<void> {
    if (this.#runAs) await chown(path, this.#runAs.uid, this.#runAs.gid);
  }

  async boot(spec: VmSpec): Promise<Vm> {
    const paths = runtimePaths(spec);
    await this.#makeRuntimeDir(spec);
    try {
      await createOverlay(paths.overlay, spec.baseDisk, imageFormat(spec.baseDisk));
      await this.#giveToVmm(paths.overlay);
    } catch (err) {
      await rm(spec.runtimeDir, { recursive: true, force: true });
      throw err;
    }
    const memory = { file: paths.memory, shared: true };
    const args = qemuArgs({
      spec,
      accel: this.accel,
      memoryFile: memory.file,
      memoryShared: true,
      rootDisk: paths.overlay,
      qmpSocket: paths.qmpSocket,
      consoleLog: paths.consoleLog,
      incoming: false,
      tscKhz: this.#tscKhz,
      runAs: this.#runAs?.name,
    });
    const { proc, qmp } = await launch(spec, args, paths.consoleLog, paths.qmpSocket);
    const host = this.#hostFor(spec);
    return new QemuVm(spec, proc, qmp, memory, paths.overlay, host, this.#runAs);
  }

  async restore(snapshotDir: string, spec: VmSpec): Promise<Vm> {
    return (await this.prepareRestore(snapshotDir, spec)).start();
  }

  /** Spawns QEMU for a snapshot, waiting on `-incoming defer`; `start()` finishes the restore. */
  async prepareRestore(snapshotDir: string, spec: VmSpec): Promise<PreparedRestore> {
    const meta = await readSnapshotMeta(snapshotDir);
    const host = this.#hostFor(spec);
    checkRestorable(meta, host, spec.shape);
    const paths = runtimePaths(spec);
    await this.#makeRuntimeDir(spec);
    try {
      await createOverlay(paths.overlay, join(snapshotDir, DISK_FILE), "qcow2");
      await this.#giveToVmm(paths.overlay);
    } catch (err) {
      await rm(spec.runtimeDir, { recursive: true, force: true });
      throw err;
    }
    const memory = { file: meta.memoryImage, shared: false };
    const diff = meta.memoryDiff ? join(snapshotDir, meta.memoryDiff) : undefined;
    const args = qemuArgs({
      spec,
      accel: this.accel,
      memoryFile: memory.file,
      memoryShared: false,
      rootDisk: paths.overlay,
      qmpSocket: paths.qmpSocket,
      consoleLog: paths.consoleLog,
      incoming: true,
      tscKhz: this.#tscKhz,
      runAs: this.#runAs?.name,
    });
    const { proc, qmp } = await launch(spec, args, paths.consoleLog, paths.qmpSocket);
    const deviceState = join(snapshotDir, DEVICE_STATE_FILE);
    const abandon = async () => {
      qmp.close();
      await proc.kill();
      await rm(spec.runtimeDir, { recursive: true, force: true });
    };
    return {
      pid: proc.pid,
      start: async () => {
        try {
          // RAM first: loading virtio devices reads their rings from guest memory.
          if (diff) applyMemoryDiff(proc.pid, await findRamMapping(proc.pid, memory.file), diff);
          await loadDeviceState(qmp, paths.migrateSocket, deviceState, spec.id);
          await qmp.execute("cont");
        } catch (err) {
          // A broken QMP connection usually means QEMU died: give its exit a moment to land.
          const died = await Promise.race([
            proc.exited.then(() => true),
            new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 500)),
          ]);
          await abandon();
          if (died)
            throw new VmmError(`restore failed: ${(await proc.exited).reason}`, spec.id, {
              cause: err,
            });
          throw err;
        }
        return new QemuVm(spec, proc, qmp, memory, paths.overlay, host, this.#runAs);
      },
      discard: abandon,
    };
  }
}

/** Streams a device-state file into a QEMU waiting on `-incoming defer`. */
async function loadDeviceState(
  qmp: QmpClient,
  socketPath: string,
  file: string,
  vmId: string,
): Promise<void> {
  const state = await readFile(file);
  await qmp.execute("migrate-set-capabilities", {
    capabilities: [{ capability: "events", state: true }],
  });
  const completed = qmp.waitForEvent("MIGRATION", (e) =>
    ["completed", "failed"].includes(String(e.data?.status)),
  );
  await qmp.execute("migrate-incoming", { uri: `unix:${socketPath}` });
  await new Promise<void>((resolve, reject) => {
    const socket = connect(socketPath);
    socket.once("error", (err) =>
      reject(new VmmError(`cannot send device state: ${err.message}`, vmId)),
    );
    socket.end(state, () => resolve());
  });
  const event = await completed;
  if (event.data?.status !== "completed")
    throw new VmmError("loading the device state failed", vmId);
}

class QemuVm implements Vm {
  readonly exited: Promise<ExitInfo>;
  #snapshots = 0;

  constructor(
    readonly spec: VmSpec,
    readonly proc: QemuProcess,
    readonly qmp: QmpClient,
    readonly memory: VmMemory,
    private rootDisk: string,
    readonly host: RestoreHost,
    readonly runAs: VmmUser | undefined,
  ) {
    this.exited = proc.exited;
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
