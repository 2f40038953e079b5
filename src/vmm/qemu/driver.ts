import { execFile } from "node:child_process";
import { chown, mkdir, rm, symlink } from "node:fs/promises";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { phase } from "../../shared/phases.js";
import type {
  Accelerator,
  PreparedRestore,
  SnapshotFile,
  Vm,
  VmmDriver,
  VmSpec,
} from "../driver.js";
import { SnapshotTamperedError } from "../errors.js";
import { cpuModel, type DiskLayer, kernelCommandLine, qemuArgs } from "./args.js";
import { limitsFor, type VmCgroup, type VmCgroups } from "./cgroups.js";
import { hostTscKhz } from "./host-tsc.js";
import { explainFailure, launch, loadDeviceState, runtimePaths } from "./launch.js";
import { applyMemoryDiff, findRamMapping } from "./memory-image.js";
import { killOrphanVmms } from "./orphans.js";
import type { Qcow2DiskChains } from "./qcow2-disk-chains.js";
import { QEMU_BINARY, vmmEnv } from "./qemu-process.js";
import { SnapshotVerifier } from "./sealed-files.js";
import { type ChainLayer, diskOf, headerName, resolveFile } from "./snapshot-chain.js";
import {
  checkRestorable,
  DEVICE_STATE_FILE,
  type RestoreHost,
  readSnapshotMeta,
} from "./snapshot-meta.js";
import { QemuVm, type QemuVmParts, type VmMemory } from "./vm.js";
import type { VmmIdentities, VmmIdentity } from "./vmm-ids.js";

const run = promisify(execFile);
/** CPU priority of a VMM prepared in the background (CFS weight ~1/10 of a running one). */
const BACKGROUND_NICE = 10;

export interface QemuDriverOptions {
  readonly accel: Accelerator;
  /**
   * Where VMs' disks are made: each VM's overlay, stacked on the base image or on a
   * snapshot's frozen disk. The orchestrator flattens chains through the same instance.
   */
  readonly disks: Qcow2DiskChains;
  /** `qemu-system-x86_64 --version`'s first line; recorded in snapshots. */
  readonly qemuVersion: string;
  /** TSC rate given to TCG guests; default: the host's (hostTscKhz). */
  readonly tscKhz?: number;
  /**
   * Uids for VMMs, one of its own per running VM: QEMU drops root for it once its files are
   * open and chroots into its runtime directory. Default: QEMU stays root, unjailed (tests of
   * the driver alone).
   */
  readonly identities?: VmmIdentities;
  /** Each VM's own cgroup with limits from its shape. Default: none. */
  readonly cgroups?: VmCgroups;
  /** TCG translated-code cache per VM, MiB (see QemuArgsInput.tcgCacheMiB). */
  readonly tcgCacheMiB?: number;
  /** Guest address-space randomization (see KernelOptions.aslr); default: off under TCG only. */
  readonly guestAslr?: boolean;
  /**
   * Lets KSM merge identical pages across VMMs: all of each QEMU's memory, guest RAM
   * included (QEMU cannot exclude it). The caller starts KSM (`enableKsm`).
   */
  readonly mergeMemory?: boolean;
  /**
   * The files a snapshot directory was sealed with (the catalog's record), checked before
   * every restore; undefined for a directory with no record, which is then refused. Default:
   * no checks (tests of the driver alone).
   */
  readonly sealedFiles?: (snapshotDir: string) => Promise<readonly SnapshotFile[] | undefined>;
}

export async function qemuVersion(): Promise<string> {
  const { stdout } = await run(QEMU_BINARY, ["--version"], { env: vmmEnv() });
  return stdout.split("\n")[0]?.trim() ?? "unknown";
}

/** What one VMM launch needs besides its spec. */
interface LaunchInput {
  readonly memory: VmMemory;
  /** The overlay's backing chain, nearest first. */
  readonly backing: readonly DiskLayer[];
  readonly kernelCommandLine: string;
  readonly incoming: boolean;
  readonly identity: VmmIdentity | undefined;
}

export class QemuDriver implements VmmDriver {
  readonly accel: Accelerator;
  readonly #o: QemuDriverOptions;
  readonly #tscKhz: number | undefined;
  readonly #guestAslr: boolean;
  readonly #verifier = new SnapshotVerifier();

  constructor(options: QemuDriverOptions) {
    this.accel = options.accel;
    this.#o = options;
    this.#tscKhz = options.tscKhz ?? hostTscKhz();
    this.#guestAslr = options.guestAslr ?? this.accel === "kvm";
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
    const meta = await readSnapshotMeta(snapshotDir);
    // What a restore here would refuse (another QEMU, CPU model or kernel) is drift too.
    checkRestorable(meta, this.#hostFor(spec), spec.shape);
    const booted = meta.kernelCommandLine;
    const now = this.#kernelCommandLine(spec);
    // The TSC hint is a reading of the host (cpuinfo's MHz wobbles on some), not a choice.
    const choices = (line: string) => line.replace(/(^| )tsc_early_khz=\d+/, "");
    if (booted !== undefined && choices(booted) === choices(now)) return undefined;
    return `its guest booted with kernel command line "${booted ?? "(not recorded)"}", a boot here now uses "${now}"`;
  }

  /**
   * Starts QEMU for `spec` in its jail and cgroup. The identity and cgroup go back when the
   * process exits, however it ends.
   */
  async #launch(spec: VmSpec, input: LaunchInput) {
    const paths = runtimePaths(spec);
    const args = qemuArgs({
      spec,
      accel: this.accel,
      memoryFile: input.memory.file,
      memoryShared: input.memory.shared,
      rootDisk: paths.overlay,
      rootBacking: input.backing,
      qmpSocket: paths.qmpSocket,
      incoming: input.incoming,
      kernelCommandLine: input.kernelCommandLine,
      tcgCacheMiB: this.#o.tcgCacheMiB,
      jail: input.identity,
    });
    let cgroup: VmCgroup | undefined;
    try {
      const limits = limitsFor(spec.shape, this.#o.tcgCacheMiB);
      cgroup = await phase("jail.cgroup", async () => this.#o.cgroups?.create(spec.id, limits));
    } catch (err) {
      this.#giveBack(input.identity);
      await rm(spec.runtimeDir, { recursive: true, force: true });
      throw err;
    }
    return phase("vmm.spawn", () =>
      launch(spec, args, paths.qmpSocket, {
        mergeable: this.#o.mergeMemory,
        cgroupProcs: cgroup?.procs,
        onExit: async () => {
          this.#giveBack(input.identity);
          await cgroup?.remove().catch(() => {});
        },
      }),
    );
  }

  #giveBack(identity: VmmIdentity | undefined): void {
    if (identity) this.#o.identities?.give(identity);
  }

  /** The Vm for a QEMU `#launch` started; `kernelCommandLine`: what its guest booted with. */
  #vm(
    spec: VmSpec,
    { proc, qmp }: Awaited<ReturnType<typeof launch>>,
    parts: Pick<QemuVmParts, "memory" | "kernelCommandLine" | "backing" | "diskBytes" | "identity">,
  ): QemuVm {
    return new QemuVm({
      ...parts,
      spec,
      proc,
      qmp,
      rootDisk: runtimePaths(spec).overlay,
      disks: this.#o.disks,
      host: this.#hostFor(spec),
      verifier: this.#verifier,
    });
  }

  /** What a snapshot of this VM records, and what a restore here must match. */
  #hostFor(spec: VmSpec): RestoreHost {
    return {
      accel: this.accel,
      cpuModel: cpuModel(this.accel),
      qemuVersion: this.#o.qemuVersion,
      kernel: spec.images.kernelVersion,
      images: spec.images.fingerprint,
    };
  }

  /**
   * The VM's runtime directory, its jail: owned by its VMM's uid (QEMU creates its sockets
   * and device state there), and holding a link from its own absolute path back to itself,
   * so every path the server hands QEMU names the same file inside the chroot as outside.
   */
  async #makeRuntimeDir(spec: VmSpec, identity: VmmIdentity | undefined): Promise<void> {
    // Parents stay traversable (0755) for the unprivileged QEMU; only the leaf is private.
    await mkdir(dirname(spec.runtimeDir), { recursive: true });
    await mkdir(spec.runtimeDir, { mode: 0o700 });
    if (!identity) return;
    const mirror = join(spec.runtimeDir, spec.runtimeDir);
    await mkdir(dirname(mirror), { recursive: true });
    await symlink("/", mirror);
    await chown(spec.runtimeDir, identity.uid, identity.gid);
  }

  killOrphans(runDir: string): Promise<number> {
    return killOrphanVmms(runDir);
  }

  /** Takes a VMM identity and makes the runtime dir; undoes both if `prepare` fails. */
  async #setUp<T>(
    spec: VmSpec,
    prepare: (identity: VmmIdentity | undefined) => Promise<T>,
  ): Promise<{ identity: VmmIdentity | undefined; prepared: T }> {
    const identity = this.#o.identities?.take();
    try {
      await phase("jail.setup", () => this.#makeRuntimeDir(spec, identity));
      return { identity, prepared: await phase("vmm.overlay", () => prepare(identity)) };
    } catch (err) {
      this.#giveBack(identity);
      await rm(spec.runtimeDir, { recursive: true, force: true });
      throw err;
    }
  }

  async boot(spec: VmSpec): Promise<Vm> {
    const paths = runtimePaths(spec);
    const { disks } = this.#o;
    const base = disks.baseLayer(spec.baseDisk);
    const { identity, prepared } = await this.#setUp(spec, async (owner) => {
      const wanted = BigInt(spec.shape.diskSizeMiB ?? 0) * 1024n * 1024n;
      const size = await disks.createOverlay(paths.overlay, base, { minSizeBytes: wanted, owner });
      return { size, grown: size > (await disks.virtualSize(spec.baseDisk)) };
    });
    const { size: diskBytes, grown: growRoot } = prepared;
    const memory: VmMemory = { file: paths.memory, shared: true };
    const commandLine = this.#kernelCommandLine(spec, growRoot);
    const launched = await this.#launch(spec, {
      memory,
      backing: [base],
      kernelCommandLine: commandLine,
      incoming: false,
      identity,
    });
    return this.#vm(spec, launched, {
      memory,
      kernelCommandLine: commandLine,
      backing: base,
      diskBytes,
      identity,
    });
  }

  async bootFromSnapshot(snapshotDir: string, spec: VmSpec): Promise<Vm> {
    const { chain, paths, backing, diskBytes, identity } = await this.#onSnapshot(
      snapshotDir,
      spec,
    );
    // A fresh RAM file, as a boot's: nothing of the snapshot's memory is mapped.
    const memory: VmMemory = { file: paths.memory, shared: true };
    const commandLine = this.#kernelCommandLine(spec);
    const launched = await this.#launch(spec, {
      memory,
      backing: chain.disk,
      kernelCommandLine: commandLine,
      incoming: false,
      identity,
    });
    return this.#vm(spec, launched, {
      memory,
      kernelCommandLine: commandLine,
      backing,
      diskBytes,
      identity,
    });
  }

  /**
   * A VM's runtime directory with its overlay stacked on a snapshot's frozen disk, once the
   * snapshot is known restorable here, its seals hold and its disk layers passed their
   * checks (QEMU opens them while still root: each a plain file no one can write any more,
   * its qcow2 header naming no other file). Every reference is resolved where the snapshot
   * lies now, refused if it leaves its siblings or the guest images directory.
   */
  async #onSnapshot(snapshotDir: string, spec: VmSpec) {
    const { disks } = this.#o;
    const chain = await phase("vmm.chain", () => disks.readChain(snapshotDir));
    checkRestorable(chain.meta, this.#hostFor(spec), spec.shape);
    await phase("vmm.verify", () => this.#verify(chain.dirs));
    await phase("vmm.check_layers", () => disks.checkLayers(chain.disk));
    const paths = runtimePaths(spec);
    const backing = chain.disk[0] as ChainLayer;
    const { identity, prepared: diskBytes } = await this.#setUp(spec, (owner) =>
      disks.createOverlay(paths.overlay, backing, {
        owner,
        backingName: headerName(diskOf(chain.dir)),
      }),
    );
    return { chain, paths, backing, diskBytes, identity };
  }

  checksumSnapshot(snapshotDir: string): Promise<readonly SnapshotFile[]> {
    return this.#verifier.checksum(snapshotDir);
  }

  /** Checks a snapshot and those it stands on (`dirs`, from readChain) against their seals. */
  async #verify(dirs: readonly string[]): Promise<void> {
    const filesOf = this.#o.sealedFiles;
    if (!filesOf) return;
    for (const dir of dirs) {
      // Sealed here, untouched since: what a checksum would prove, known without waiting for one.
      if (await this.#verifier.unchangedSinceSealed(dir)) continue;
      const files = await filesOf(dir);
      if (!files) throw new SnapshotTamperedError(`${dir}: no checksums recorded for its files`);
      await this.#verifier.verify(dir, files);
    }
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
    const { chain, paths, backing, diskBytes, identity } = await this.#onSnapshot(
      snapshotDir,
      spec,
    );
    const { meta } = chain;
    const memory: VmMemory = {
      file: chain.memoryImage.path,
      shared: false,
      snapshotDir: chain.memoryImage.dir,
    };
    const diff = meta.memoryDiff
      ? (await resolveFile(chain.dir, { file: meta.memoryDiff }, "memory diff")).path
      : undefined;
    // The guest booted long ago; QEMU's device set still wants a command line.
    const launched = await this.#launch(spec, {
      memory,
      backing: chain.disk,
      kernelCommandLine: this.#kernelCommandLine(spec),
      incoming: true,
      identity,
    });
    const { proc, qmp } = launched;
    if (options.background) proc.setNice(BACKGROUND_NICE);
    const deviceState = join(chain.dir, DEVICE_STATE_FILE);
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
    const load = () =>
      phase("vmm.load", async () => {
        // RAM first: loading virtio devices reads their rings from guest memory.
        if (diff) {
          const ramBytes = spec.shape.memoryMiB * 1024 * 1024;
          applyMemoryDiff(proc.pid, await findRamMapping(proc.pid, memory.file, ramBytes), diff);
        }
        await loadDeviceState(qmp, paths.migrateSocket, deviceState, spec.id);
        loaded = true;
      });
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
          await phase("vmm.cont", () => qmp.execute("cont"));
        });
        return this.#vm(spec, launched, {
          memory,
          kernelCommandLine: meta.kernelCommandLine,
          backing,
          diskBytes,
          identity,
        });
      },
      discard: abandon,
    };
  }
}
