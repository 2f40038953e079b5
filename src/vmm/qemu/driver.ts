import { execFile } from "node:child_process";
import { chown, mkdir, rm, symlink } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { promisify } from "node:util";
import { phase } from "../../shared/phases.js";
import type {
  Accelerator,
  LeftoverVm,
  PreparedRestore,
  SnapshotFile,
  Vm,
  VmmDriver,
  VmSpec,
} from "../driver.js";
import { SnapshotTamperedError, VmmError } from "../errors.js";
import { cpuModel, type DiskLayer, kernelCommandLine, qemuArgs } from "./args.js";
import { limitsFor, type VmCgroup, type VmCgroups } from "./cgroups.js";
import { hostTscKhz } from "./host-tsc.js";
import type { KeeperClient } from "./keeper-client.js";
import { explainFailure, launch, loadDeviceState, runtimePaths } from "./launch.js";
import { leftoverOf } from "./leftover.js";
import { applyMemoryDiff, findRamMapping } from "./memory-image.js";
import { killOrphanVmms } from "./orphans.js";
import type { Qcow2DiskChains } from "./qcow2-disk-chains.js";
import { QEMU_BINARY, spawnLocalVmm, vmmEnv } from "./qemu-process.js";
import { QmpClient } from "./qmp-client.js";
import { checkQmpSocket, ensureQmpDir, qmpSocketPath, removeQmpSockets } from "./qmp-dir.js";
import { checkProcess, runState, settleDisk } from "./reattach.js";
import { SnapshotVerifier } from "./sealed-files.js";
import { type ChainLayer, diskOf, headerName, resolveFile } from "./snapshot-chain.js";
import {
  checkRestorable,
  DEVICE_STATE_FILE,
  type RestoreHost,
  readSnapshotMeta,
} from "./snapshot-meta.js";
import { QemuVm, type QemuVmParts, type VmMemory } from "./vm.js";
import { parseVmRecord, type VmRecord } from "./vm-record.js";
import { type VmmHold, VmmHolds } from "./vmm-holds.js";
import type { VmmIdentities, VmmIdentity } from "./vmm-ids.js";
import { type SpawnVmm, setNice, type VmmProcess } from "./vmm-process.js";

const run = promisify(execFile);
/** CPU priority of a VMM prepared in the background (CFS weight ~1/10 of a running one). */
const BACKGROUND_NICE = 10;
/** The QMP directory beside the runtime dirs when none is configured (no VM id starts with "."). */
const DEFAULT_QMP_DIR = ".qmp";

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
  /**
   * Where QEMU binds each VM's QMP socket (`<qmpDir>/<vm id>.sock`): a directory of root's,
   * 0700, made here, outside every jail (qmp-dir.ts). Default: `.qmp` beside each VM's
   * runtime directory.
   */
  readonly qmpDir?: string;
  /**
   * The keeper holding this node's VMMs (keeper-client.ts): QEMU is spawned there, and each
   * VM's record (`QemuVm.record()`) is kept there as its note whenever it changes, for the
   * next server to reattach it. Default: none.
   */
  readonly keeper?: KeeperClient;
  /** How QEMU is started; default: by the keeper, else as this process's child (`QemuProcess`). */
  readonly spawn?: SpawnVmm;
  /**
   * Told a VM's record (`QemuVm.record()`) when a fork capture is about to switch its root
   * disk and once it did, so that a saved record always lets a reattach tell which disk the
   * VM is on. A failure before the switch fails the capture.
   */
  readonly recordChanged?: (record: VmRecord) => Promise<void>;
}

/** A VM `reattach` made again, and what it found its QEMU doing. */
export interface QemuReattach {
  readonly vm: QemuVm;
  /** False when its vCPUs are stopped (a capture was under way, or it was kept stopped). */
  readonly running: boolean;
  /**
   * A fork capture the record had under way: `switched` when QEMU took the new overlay (the
   * VM stands on the capture's disk now), else undone.
   */
  readonly interruptedCapture?: { readonly dir: string; readonly switched: boolean };
}

/** A QEMU `#launch` started, connected. */
interface Launched {
  readonly proc: VmmProcess;
  readonly qmp: QmpClient;
  readonly qmpSocket: string;
  readonly startTime: number;
  readonly hold: VmmHold;
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
  readonly #holds: VmmHolds;

  constructor(options: QemuDriverOptions) {
    this.accel = options.accel;
    this.#o = options;
    this.#holds = new VmmHolds(options.identities, options.cgroups);
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
  async #launch(spec: VmSpec, input: LaunchInput): Promise<Launched> {
    const paths = runtimePaths(spec);
    let qmpSocket: string;
    try {
      qmpSocket = await this.#freshQmpSocket(spec);
    } catch (err) {
      this.#giveBack(input.identity);
      await rm(spec.runtimeDir, { recursive: true, force: true });
      throw err;
    }
    const args = qemuArgs({
      spec,
      accel: this.accel,
      memoryFile: input.memory.file,
      memoryShared: input.memory.shared,
      rootDisk: paths.overlay,
      rootBacking: input.backing,
      qmpSocket,
      incoming: input.incoming,
      kernelCommandLine: input.kernelCommandLine,
      tcgCacheMiB: this.#o.tcgCacheMiB,
      jail: input.identity,
    });
    let cgroup: VmCgroup | undefined;
    try {
      // Connected first: a keeper starting (after the last one died) sweeps VM cgroups.
      await this.#o.keeper?.ready();
      const limits = limitsFor(spec.shape, this.#o.tcgCacheMiB);
      cgroup = await phase("jail.cgroup", async () => this.#o.cgroups?.create(spec.id, limits));
    } catch (err) {
      this.#giveBack(input.identity);
      await rm(spec.runtimeDir, { recursive: true, force: true });
      throw err;
    }
    const hold: VmmHold = {
      identity: input.identity,
      cgroup,
      qmpSocket,
      released: false,
      attached: false,
    };
    let launched: Awaited<ReturnType<typeof launch>>;
    try {
      launched = await phase("vmm.spawn", () =>
        launch(spec, args, qmpSocket, {
          spawn: this.#o.spawn ?? this.#o.keeper?.spawn ?? spawnLocalVmm,
          mergeable: this.#o.mergeMemory,
          cgroupProcs: cgroup?.procs,
        }),
      );
    } catch (err) {
      await this.#holds.release(hold); // launch() saw to it that no process is left
      throw err;
    }
    this.#holds.keep(launched.proc, hold);
    return { ...launched, qmpSocket, hold };
  }

  /** The QMP socket path for `spec`, in its directory of root's, with nothing left at it. */
  async #freshQmpSocket(spec: VmSpec): Promise<string> {
    const dir = this.#qmpDir(spec);
    await ensureQmpDir(dir);
    const path = qmpSocketPath(dir, spec.id);
    await rm(path, { force: true }); // a socket an earlier VM of this id left (crash)
    return path;
  }

  #qmpDir(spec: VmSpec): string {
    return this.#o.qmpDir ?? join(dirname(spec.runtimeDir), DEFAULT_QMP_DIR);
  }

  #giveBack(identity: VmmIdentity | undefined): void {
    this.#holds.giveBack(identity);
  }

  /** The Vm for a QEMU `#launch` started; `kernelCommandLine`: what its guest booted with. */
  #vm(
    spec: VmSpec,
    { proc, qmp, qmpSocket, startTime, hold }: Launched,
    parts: Pick<QemuVmParts, "memory" | "kernelCommandLine" | "backing" | "diskBytes" | "identity">,
  ): QemuVm {
    return this.#qemuVm(
      {
        ...parts,
        spec,
        proc,
        startTime,
        qmp,
        qmpSocket,
        rootDisk: runtimePaths(spec).overlay,
        host: this.#hostFor(spec),
        cgroup: hold.cgroup !== undefined,
      },
      hold,
    );
  }

  /** A QemuVm driving the VMM `hold` is for, until it is detached. */
  #qemuVm(
    parts: Omit<QemuVmParts, "disks" | "verifier" | "recordChanged" | "detached">,
    hold: VmmHold,
  ): QemuVm {
    hold.attached = true;
    const { keeper, recordChanged } = this.#o;
    return new QemuVm({
      ...parts,
      disks: this.#o.disks,
      verifier: this.#verifier,
      recordChanged:
        keeper || recordChanged
          ? async (record) => {
              await this.#noteRecord(record);
              await recordChanged?.(record);
            }
          : undefined,
      detached: () => {
        hold.attached = false;
      },
    });
  }

  /** Keeps a VM's record with its VMM in the keeper (when there is one). */
  async #noteRecord(record: VmRecord): Promise<void> {
    await this.#o.keeper?.note(record.spec.id, JSON.stringify(record));
  }

  /**
   * A VM just made (booted, restored, reattached), once its record is with the keeper: a
   * VM whose record cannot be kept is given up (the next server could not take it back).
   */
  async #made(vm: QemuVm): Promise<QemuVm> {
    try {
      await this.#noteRecord(vm.record());
    } catch (err) {
      await vm.destroy().catch(() => {});
      throw err;
    }
    return vm;
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

  /**
   * Also kills QEMUs with a socket in the configured QMP directory, then removes every
   * socket there: all were those QEMUs'. The VMMs of `keep` this driver holds (reattached
   * here) are left alone, and their sockets.
   */
  async killOrphans(runDir: string, keep: ReadonlySet<string> = new Set()): Promise<number> {
    const qmpDir = this.#o.qmpDir ?? join(runDir, DEFAULT_QMP_DIR);
    // The VMMs of `keep` this driver holds (reattached from the keeper) are not orphans.
    const spare = new Set<number>();
    for (const pid of this.#holds.pids()) {
      const socket = this.#holds.of(pid)?.qmpSocket;
      if (socket && keep.has(basename(socket, ".sock"))) spare.add(pid);
    }
    const killed = await killOrphanVmms([runDir, qmpDir], spare);
    await removeQmpSockets(qmpDir, keep);
    return killed;
  }

  /**
   * What the keeper held for an earlier server (`KeeperClient.held()`), each VMM with the
   * record it noted: reattached from that record (`reattach`), or killed (its cgroup and QMP
   * socket removed). None without a keeper.
   */
  leftovers(): readonly LeftoverVm[] {
    return (this.#o.keeper?.held() ?? []).map((held) =>
      leftoverOf(held, {
        reattach: (record, proc) => this.reattach(record, proc),
        cleanUp: async (id) => {
          await this.#o.cgroups?.remove(id).catch(() => {});
          const dir = this.#o.qmpDir;
          if (dir) await rm(qmpSocketPath(dir, id), { force: true }).catch(() => {});
        },
      }),
    );
  }

  /** Once what exited VMMs held (uids, cgroups, QMP sockets) is given back. */
  settled(): Promise<void> {
    return this.#holds.settled();
  }

  /**
   * Makes a QemuVm again for a QEMU that kept running without its object (`QemuVm.detach()`,
   * or a server that stopped): `record` is its `QemuVm.record()` (as is, or read back from
   * JSON), `proc` its process. Checks that the process is the record's QEMU, running as the
   * recorded uid in its jail; takes that uid (refused if in use here) and finds its cgroup
   * (never made); reconnects QMP at the recorded socket, which must be where this driver binds
   * them; and settles a fork capture the record had under way by asking QEMU which disk it is
   * on. A record of another version, or whose QEMU is gone, is refused.
   */
  async reattach(record: unknown, proc: VmmProcess): Promise<QemuReattach> {
    const r = parseVmRecord(record);
    const { spec } = r;
    const qmpSocket = qmpSocketPath(this.#qmpDir(spec), spec.id);
    if (r.qmpSocket !== qmpSocket)
      throw new VmmError(
        `its QMP socket ${r.qmpSocket} is not this driver's ${qmpSocket}`,
        spec.id,
      );
    await checkProcess(r, proc);
    await ensureQmpDir(this.#qmpDir(spec));
    await checkQmpSocket(qmpSocket, spec.id);
    // This driver's own VM, detached: it still holds the VM's uid and cgroup.
    const own = this.#holds.of(proc.pid);
    if (own?.attached) throw new VmmError("it is attached here already", spec.id);
    if (own && own.identity?.uid !== r.identity?.uid)
      throw new VmmError(`pid ${proc.pid} holds another uid here`, spec.id);
    const hold = own ?? (await this.#holds.claim(r, proc.pid, qmpSocket));
    let qmp: QmpClient | undefined;
    try {
      qmp = await QmpClient.connect(qmpSocket, spec.id);
      const running = await runState(qmp, spec.id);
      const disk = await settleDisk(qmp, r);
      if (!own) this.#holds.keep(proc, hold);
      const vm = this.#qemuVm(
        {
          spec,
          proc,
          startTime: r.startTime,
          qmp,
          qmpSocket,
          memory: r.memory,
          rootDisk: disk.rootDisk,
          rootNode: disk.rootNode,
          backing: disk.backing,
          captures: r.captures,
          diskBytes: BigInt(r.diskBytes),
          host: r.host,
          identity: hold.identity,
          kernelCommandLine: r.kernelCommandLine,
          cgroup: hold.cgroup !== undefined,
        },
        hold,
      );
      await this.#noteRecord(vm.record()).catch((err: unknown) => {
        vm.detach(); // left running as found; the caller decides
        throw err;
      });
      return { vm, running, interruptedCapture: disk.interruptedCapture };
    } catch (err) {
      qmp?.close();
      // What was claimed for it goes back; the VMM itself is left as it was found.
      if (!own) this.#giveBack(hold.identity);
      throw err;
    }
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
    return this.#made(
      this.#vm(spec, launched, {
        memory,
        kernelCommandLine: commandLine,
        backing: base,
        diskBytes,
        identity,
      }),
    );
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
    return this.#made(
      this.#vm(spec, launched, {
        memory,
        kernelCommandLine: commandLine,
        backing,
        diskBytes,
        identity,
      }),
    );
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
    if (options.background) setNice(proc.pid, BACKGROUND_NICE);
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
      exited: proc.exited,
      warm: (ready) =>
        guarded(async () => {
          if (!loaded) await load();
          await qmp.execute("cont");
          await ready();
          await qmp.execute("stop");
        }),
      start: async () => {
        if (options.background) setNice(proc.pid, 0);
        await guarded(async () => {
          if (!loaded) await load();
          await phase("vmm.cont", () => qmp.execute("cont"));
        });
        return this.#made(
          this.#vm(spec, launched, {
            memory,
            kernelCommandLine: meta.kernelCommandLine,
            backing,
            diskBytes,
            identity,
          }),
        );
      },
      discard: abandon,
    };
  }
}
