import { execFile } from "node:child_process";
import { chown, mkdir, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import type { Accelerator, PreparedRestore, Vm, VmmDriver, VmSpec } from "../driver.js";
import { cpuModel, kernelCommandLine, qemuArgs } from "./args.js";
import { flattenDisk } from "./flatten-disk.js";
import { hostTscKhz } from "./host-tsc.js";
import { explainFailure, launch, loadDeviceState, runtimePaths } from "./launch.js";
import { applyMemoryDiff, findRamMapping } from "./memory-image.js";
import { killOrphanVmms } from "./orphans.js";
import { createOverlay, imageFormat, virtualSize } from "./qcow2-overlay.js";
import { QEMU_BINARY } from "./qemu-process.js";
import {
  checkRestorable,
  DEVICE_STATE_FILE,
  DISK_FILE,
  type RestoreHost,
  readSnapshotMeta,
} from "./snapshot-meta.js";
import { QemuVm, type VmMemory, type VmmUser } from "./vm.js";

export type { VmmUser } from "./vm.js";

const run = promisify(execFile);
/** CPU priority of a VMM prepared in the background (CFS weight ~1/10 of a running one). */
const BACKGROUND_NICE = 10;

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
  /** TCG translated-code cache per VM, MiB (see QemuArgsInput.tcgCacheMiB). */
  readonly tcgCacheMiB?: number;
  /** Guest address-space randomization (see KernelOptions.aslr); default: off under TCG only. */
  readonly guestAslr?: boolean;
  /**
   * Lets KSM merge identical pages across VMMs: all of each QEMU's memory, guest RAM
   * included (QEMU 7.2 cannot exclude it). The caller starts KSM (`enableKsm`).
   */
  readonly mergeMemory?: boolean;
}

export async function qemuVersion(): Promise<string> {
  const { stdout } = await run(QEMU_BINARY, ["--version"]);
  return stdout.split("\n")[0]?.trim() ?? "unknown";
}

export class QemuDriver implements VmmDriver {
  readonly accel: Accelerator;
  readonly #qemuVersion: string;
  readonly #tscKhz: number | undefined;
  readonly #runAs: VmmUser | undefined;
  readonly #tcgCacheMiB: number | undefined;
  readonly #guestAslr: boolean;
  readonly #mergeMemory: boolean;

  constructor(options: QemuDriverOptions) {
    this.accel = options.accel;
    this.#qemuVersion = options.qemuVersion;
    this.#tscKhz = options.tscKhz ?? hostTscKhz();
    this.#runAs = options.runAs;
    this.#tcgCacheMiB = options.tcgCacheMiB;
    this.#guestAslr = options.guestAslr ?? this.accel === "kvm";
    this.#mergeMemory = options.mergeMemory ?? false;
  }

  /** The kernel command line a boot of `spec` gets here. */
  #kernelCommandLine(spec: VmSpec, growRoot = false): string {
    return kernelCommandLine(spec, {
      emulated: this.accel === "tcg",
      tscKhz: this.#tscKhz,
      growRoot,
      aslr: this.#guestAslr,
    });
  }

  async bootDrift(snapshotDir: string, spec: VmSpec): Promise<string | undefined> {
    const booted = (await readSnapshotMeta(snapshotDir)).kernelCommandLine;
    const now = this.#kernelCommandLine(spec);
    // The TSC hint is a reading of the host (cpuinfo's MHz wobbles on some), not a choice.
    const choices = (line: string) => line.replace(/(^| )tsc_early_khz=\d+/, "");
    if (booted !== undefined && choices(booted) === choices(now)) return undefined;
    return `its guest booted with kernel command line "${booted ?? "(not recorded)"}", a boot here now uses "${now}"`;
  }

  /** Starts QEMU for `spec` (booting, or waiting for a snapshot's state when `incoming`). */
  #launch(spec: VmSpec, memory: VmMemory, kernelCommandLine: string, incoming: boolean) {
    const paths = runtimePaths(spec);
    const args = qemuArgs({
      spec,
      accel: this.accel,
      memoryFile: memory.file,
      memoryShared: memory.shared,
      rootDisk: paths.overlay,
      qmpSocket: paths.qmpSocket,
      consoleLog: paths.consoleLog,
      incoming,
      kernelCommandLine,
      tcgCacheMiB: this.#tcgCacheMiB,
      runAs: this.#runAs?.name,
    });
    return launch(spec, args, paths.consoleLog, paths.qmpSocket, { mergeable: this.#mergeMemory });
  }

  /** The Vm for a QEMU `#launch` started; `kernelCommandLine`: what its guest booted with. */
  #vm(
    spec: VmSpec,
    memory: VmMemory,
    { proc, qmp }: Awaited<ReturnType<typeof launch>>,
    kernelCommandLine: string | undefined,
  ): QemuVm {
    return new QemuVm({
      spec,
      proc,
      qmp,
      memory,
      rootDisk: runtimePaths(spec).overlay,
      host: this.#hostFor(spec),
      runAs: this.#runAs,
      kernelCommandLine,
    });
  }

  /** What a snapshot of this VM records, and what a restore here must match. */
  #hostFor(spec: VmSpec): RestoreHost {
    return {
      accel: this.accel,
      cpuModel: cpuModel(this.accel),
      qemuVersion: this.#qemuVersion,
      kernel: spec.images.kernelVersion,
      images: spec.images.fingerprint,
    };
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

  killOrphans(runDir: string): Promise<number> {
    return killOrphanVmms(runDir);
  }

  async boot(spec: VmSpec): Promise<Vm> {
    const paths = runtimePaths(spec);
    await this.#makeRuntimeDir(spec);
    let growRoot: boolean;
    try {
      const wanted = BigInt(spec.shape.diskSizeMiB ?? 0) * 1024n * 1024n;
      const size = await createOverlay(
        paths.overlay,
        spec.baseDisk,
        imageFormat(spec.baseDisk),
        wanted,
      );
      growRoot = size > (await virtualSize(spec.baseDisk));
      await this.#giveToVmm(paths.overlay);
    } catch (err) {
      await rm(spec.runtimeDir, { recursive: true, force: true });
      throw err;
    }
    const memory = { file: paths.memory, shared: true };
    const commandLine = this.#kernelCommandLine(spec, growRoot);
    const launched = await this.#launch(spec, memory, commandLine, false);
    return this.#vm(spec, memory, launched, commandLine);
  }

  flattenDisk(snapshotDir: string, ontoDir: string): Promise<void> {
    return flattenDisk(snapshotDir, ontoDir, this.#runAs);
  }

  async restore(snapshotDir: string, spec: VmSpec): Promise<Vm> {
    return (await this.prepareRestore(snapshotDir, spec)).start();
  }

  /** Spawns QEMU for a snapshot, waiting on `-incoming defer`; `start()` finishes the restore. */
  async prepareRestore(
    snapshotDir: string,
    spec: VmSpec,
    options: { background?: boolean } = {},
  ): Promise<PreparedRestore> {
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
    // The guest booted long ago; QEMU's device set still wants a command line.
    const { proc, qmp } = await this.#launch(spec, memory, this.#kernelCommandLine(spec), true);
    if (options.background) proc.setNice(BACKGROUND_NICE);
    const deviceState = join(snapshotDir, DEVICE_STATE_FILE);
    const abandon = async () => {
      qmp.close();
      await proc.kill();
      await rm(spec.runtimeDir, { recursive: true, force: true });
    };
    /** Runs `step`; on failure reports why (QEMU's own reason if it died) and gives the VMM up. */
    const guarded = async (step: () => Promise<void>) => {
      try {
        await step();
      } catch (err) {
        const reported = await explainFailure(proc, err);
        await abandon();
        throw reported;
      }
    };
    let loaded = false;
    const load = async () => {
      // RAM first: loading virtio devices reads their rings from guest memory.
      if (diff) applyMemoryDiff(proc.pid, await findRamMapping(proc.pid, memory.file), diff);
      await loadDeviceState(qmp, paths.migrateSocket, deviceState, spec.id);
      loaded = true;
    };
    return {
      pid: proc.pid,
      warm: (ready) =>
        guarded(async () => {
          if (!loaded) await load();
          await qmp.execute("cont");
          await ready();
          await qmp.execute("stop");
        }),
      start: async () => {
        if (options.background) proc.setNice(0);
        await guarded(async () => {
          if (!loaded) await load();
          await qmp.execute("cont");
        });
        return this.#vm(spec, memory, { proc, qmp }, meta.kernelCommandLine);
      },
      discard: abandon,
    };
  }
}
