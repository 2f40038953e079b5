/**
 * FakeVmmDriver: a STAND-IN for QemuDriver in orchestrator unit tests. It runs no VM. A
 * fake guest is a small record (the token and env its envd holds, a key/value "memory" a
 * test writes into) that a snapshot writes into the snapshot directory (with a meta.json, as
 * the real one) and a restore reads back, so forks and resumes carry exactly what was
 * captured. Runtime directories are real directories, created and removed as QEMU's are.
 * Tests steer it: hold VM starts at a gate, fail or crash the next capture, crash a VMM.
 */
import { createHash } from "node:crypto";
import { chmod, mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Slot } from "../../src/network/index.js";
import type {
  Accelerator,
  ExitInfo,
  LeftoverVm,
  MachineShape,
  PreparedRestore,
  SnapshotFile,
  SnapshotTiming,
  Vm,
  VmmDriver,
  VmSpec,
} from "../../src/vmm/index.js";
import { SnapshotMismatchError, VmmError } from "../../src/vmm/index.js";
import { Gate } from "./gate.js";

export interface FakeGuest {
  /** The access token the guest's envd holds (set by /init); undefined: none. */
  envdToken?: string;
  envVars: Record<string, string>;
  /** What a test puts "in the guest": survives snapshots, forks and resumes. */
  memory: Record<string, string>;
  /** /init calls this guest answered since it was booted (carried by snapshots). */
  inits: number;
  /** What a test puts "on the guest's disk": survives a reboot too (bootFromSnapshot). */
  disk?: Record<string, string>;
  /** The kernel command line the guest booted with (carried by snapshots, as QEMU's meta). */
  commandLine?: string;
}

/** What a fake capture records of its machine, as QEMU's meta.json does. */
interface FakeMeta {
  readonly fake: true;
  readonly vm: string;
  readonly shape: MachineShape;
}

const GUEST_FILE = "fake-guest.json";
const META_FILE = "meta.json";

/**
 * A spec for a fake guest in `slot` (its namespace is how the fake agent finds the guest),
 * its runtime directory under `runDir`. The fake opens no image: they are names only.
 */
export function fakeVmSpec(
  id: string,
  slot: Pick<Slot, "netns" | "tapName" | "guestAddress" | "gateway">,
  runDir: string,
): VmSpec {
  return {
    id,
    shape: { vcpus: 1, memoryMiB: 512 },
    images: {
      kernel: "/fake/vmlinuz",
      kernelVersion: "6.1.0-fake",
      fingerprint: "fake-images-1",
      initramfs: "/fake/initramfs",
      agentDrive: "/fake/agent-drive",
    },
    baseDisk: "/fake/rootfs",
    network: { kind: "tap", netns: slot.netns, tap: slot.tapName },
    runtimeDir: join(runDir, id),
    guestIp: `${slot.guestAddress}/30`,
    guestGateway: slot.gateway,
  };
}

/** The part of a boot's kernel command line a spec chooses (what bootDrift compares). */
function commandLineOf(spec: VmSpec): string {
  return [spec.images.kernelArgs ?? "", spec.extraKernelArgs ?? ""].join(" ").trim();
}
let nextPid = 100_000;

export class FakeVm implements Vm {
  readonly pid = nextPid++;
  readonly exited: Promise<ExitInfo>;
  /** The vCPUs run (a prepared restore is stopped until started). */
  running = false;
  /** The driver's start count when this VM was made or reattached (older: an orphan). */
  generation: number;
  /** Let go of (`detach`): its VMM runs on, refusing everything until reattached. */
  detached = false;
  /** The snapshot directory its disk stands on (what a reattach reports). */
  diskSnapshotDir: string | undefined;
  #exit!: (info: ExitInfo) => void;
  #gone = false;

  constructor(
    readonly driver: FakeVmmDriver,
    readonly spec: VmSpec,
    readonly guest: FakeGuest,
  ) {
    this.exited = new Promise((resolve) => {
      this.#exit = resolve;
    });
    this.generation = driver.generation;
    driver.alive.add(this);
  }

  detach(): void {
    this.detached = true;
  }

  get id(): string {
    return this.spec.id;
  }

  async consoleTail(): Promise<string> {
    return `fake guest ${this.id} booted\n`;
  }

  /** What `cpuTimeMs()` answers: a test sets it (undefined: not known). */
  cpuMs: number | undefined;

  async cpuTimeMs(): Promise<number | undefined> {
    return this.cpuMs;
  }

  get gone(): boolean {
    return this.#gone;
  }

  async snapshot(
    dir: string,
    opts: { resume: boolean; keepStopped?: boolean },
  ): Promise<SnapshotTiming> {
    if (this.#gone) throw new VmmError("the VMM is gone", this.id);
    if (this.detached) throw new VmmError("the VM was detached", this.id);
    const fault = this.driver.takeSnapshotFault();
    if (fault === "crash") {
      this.crash("killed by a signal during the capture");
      throw new VmmError("QMP connection closed during the capture", this.id);
    }
    if (fault === "error") throw new VmmError("QMP xen-save-devices-state failed", this.id);
    await mkdir(dir, { recursive: true });
    const { vcpus, memoryMiB } = this.spec.shape;
    const meta: FakeMeta = { fake: true, vm: this.id, shape: { vcpus, memoryMiB } };
    await writeFile(join(dir, META_FILE), JSON.stringify(meta));
    await writeFile(join(dir, GUEST_FILE), JSON.stringify(this.guest));
    // Sealed, as QEMU's captures are: read-only.
    for (const name of [META_FILE, GUEST_FILE]) await chmod(join(dir, name), 0o444);
    const keptStopped = !opts.resume && opts.keepStopped === true;
    this.driver.captures.push({ vmId: this.id, dir, resume: opts.resume, keptStopped });
    if (opts.resume || keptStopped) this.diskSnapshotDir = dir;
    if (keptStopped) this.running = false;
    else if (!opts.resume) this.#end({ expected: true, reason: "quit after the capture" });
    return { pausedMs: 1, deviceStateMs: 0, memoryMs: 0, diskMs: 0, dirtyPages: 0, keptStopped };
  }

  async continue(): Promise<void> {
    if (this.#gone) throw new VmmError("the VMM is gone", this.id);
    this.running = true;
  }

  async destroy(): Promise<void> {
    this.#end({ expected: true, reason: "destroyed" });
    await rm(this.spec.runtimeDir, { recursive: true, force: true });
  }

  /** The VMM dies on its own (a test's "QEMU crashed"). */
  crash(reason = "killed by SIGSEGV"): void {
    this.#end({ expected: false, reason });
  }

  #end(info: Omit<ExitInfo, "code" | "signal">): void {
    if (this.#gone) return;
    this.#gone = true;
    this.running = false;
    this.driver.alive.delete(this);
    this.#exit({ code: null, signal: null, ...info });
  }
}

export class FakeVmmDriver implements VmmDriver {
  readonly accel: Accelerator = "tcg";
  /**
   * VMMs outlive a crashed server in a keeper (`leftovers()` offers them to the next one);
   * unset, they are orphans for the next one to kill.
   */
  keeper = false;
  /** Starts so far (`leftovers()` is called once per start). */
  generation = 0;
  /** VMs whose VMM has not exited, started by any orchestrator using this driver. */
  readonly alive = new Set<FakeVm>();
  readonly captures: { vmId: string; dir: string; resume: boolean; keptStopped: boolean }[] = [];
  boots = 0;
  restores = 0;
  /** What bootDrift reports for every snapshot (undefined: no drift; an Error: thrown). */
  drift: string | Error | undefined;
  #startGate: Gate | undefined;
  #snapshotFaults: ("error" | "crash")[] = [];

  /** Every restore (plain or a pooled VMM's start) waits until the gate opens. */
  holdStarts(): Gate {
    this.#startGate = new Gate();
    return this.#startGate;
  }

  /** The next capture fails: "error" leaves the VMM running, "crash" kills it. */
  failNextSnapshot(how: "error" | "crash"): void {
    this.#snapshotFaults.push(how);
  }

  takeSnapshotFault(): "error" | "crash" | undefined {
    return this.#snapshotFaults.shift();
  }

  /** The live VM attached to a slot's namespace (how the fake agent finds its guest). */
  vmIn(netns: string): FakeVm | undefined {
    // A loop, not a copy of the set: simulated nodes (bench/lib/simulated-nodes.ts) hold thousands.
    for (const vm of this.alive) {
      if (vm.spec.network.kind === "tap" && vm.spec.network.netns === netns) return vm;
    }
    return undefined;
  }

  async boot(spec: VmSpec): Promise<Vm> {
    this.boots += 1;
    await makeRuntimeDir(spec);
    const commandLine = commandLineOf(spec);
    const vm = new FakeVm(this, spec, { envVars: {}, memory: {}, inits: 0, commandLine });
    vm.running = true;
    return vm;
  }

  async bootFromSnapshot(snapshotDir: string, spec: VmSpec): Promise<Vm> {
    const captured = await readCapture(snapshotDir, spec);
    this.boots += 1;
    await makeRuntimeDir(spec);
    // A fresh guest on the captured disk: no envd token, no env, nothing in memory.
    const vm = new FakeVm(this, spec, {
      envVars: {},
      memory: {},
      inits: 0,
      disk: captured.disk,
      commandLine: commandLineOf(spec),
    });
    vm.diskSnapshotDir = snapshotDir;
    vm.running = true;
    return vm;
  }

  async restore(snapshotDir: string, spec: VmSpec): Promise<Vm> {
    const prepared = await this.prepareRestore(snapshotDir, spec);
    return prepared.start();
  }

  async prepareRestore(snapshotDir: string, spec: VmSpec): Promise<PreparedRestore> {
    const guest = await readCapture(snapshotDir, spec);
    await makeRuntimeDir(spec);
    const vm = new FakeVm(this, spec, guest);
    vm.diskSnapshotDir = snapshotDir;
    return {
      pid: vm.pid,
      exited: vm.exited,
      warm: async (ready) => {
        vm.running = true;
        await ready();
        vm.running = false;
      },
      start: async () => {
        await this.#startGate?.passed(vm.id);
        if (vm.gone) throw new VmmError("the VMM exited before it started", vm.id);
        this.restores += 1;
        vm.running = true;
        return vm;
      },
      discard: () => vm.destroy(),
    };
  }

  async checksumSnapshot(snapshotDir: string): Promise<readonly SnapshotFile[]> {
    const files: SnapshotFile[] = [];
    for (const name of (await readdir(snapshotDir)).sort()) {
      const data = await readFile(join(snapshotDir, name));
      files.push({
        name,
        bytes: data.length,
        sha256: createHash("sha256").update(data).digest("hex"),
      });
    }
    return files;
  }

  async bootDrift(snapshotDir: string, spec: VmSpec): Promise<string | undefined> {
    if (this.drift instanceof Error) throw this.drift;
    if (this.drift !== undefined) return this.drift;
    const booted = (await readCapture(snapshotDir, spec, false)).commandLine ?? "";
    const now = commandLineOf(spec);
    return booted === now
      ? undefined
      : `its guest booted with "${booted}", a boot here uses "${now}"`;
  }

  leftovers(): readonly LeftoverVm[] {
    this.generation += 1;
    if (!this.keeper) return [];
    return [...this.alive]
      .filter((vm) => vm.generation < this.generation)
      .map((vm) => ({
        id: vm.id,
        pid: vm.pid,
        spec: vm.spec,
        reattach: async () => {
          if (vm.gone) throw new VmmError("the VMM is gone", vm.id);
          vm.generation = this.generation;
          vm.detached = false;
          this.reattached.push(vm.id);
          return { vm, running: vm.running, diskSnapshotDir: vm.diskSnapshotDir };
        },
        kill: () => vm.destroy(),
      }));
  }

  /** Ids of the VMs reattached so far. */
  readonly reattached: string[] = [];

  async killOrphans(runDir: string, keep: ReadonlySet<string> = new Set()): Promise<number> {
    const orphans = [...this.alive].filter(
      (vm) => vm.spec.runtimeDir.startsWith(`${runDir}/`) && !keep.has(vm.id),
    );
    for (const vm of orphans) vm.crash("killed as an orphan");
    return orphans.length;
  }
}

/**
 * The guest a capture holds, once the capture is known restorable with `spec` (a snapshot
 * directory, of the same machine shape), as QEMU's driver checks before it starts anything.
 */
async function readCapture(
  snapshotDir: string,
  spec: VmSpec,
  checkShape = true,
): Promise<FakeGuest> {
  let meta: FakeMeta;
  let guest: FakeGuest;
  try {
    meta = JSON.parse(await readFile(join(snapshotDir, META_FILE), "utf8")) as FakeMeta;
    guest = JSON.parse(await readFile(join(snapshotDir, GUEST_FILE), "utf8")) as FakeGuest;
  } catch (err) {
    throw new VmmError(`snapshot ${snapshotDir} has no readable capture`, spec.id, { cause: err });
  }
  const { vcpus, memoryMiB } = spec.shape;
  if (
    checkShape &&
    meta.shape &&
    (meta.shape.vcpus !== vcpus || meta.shape.memoryMiB !== memoryMiB)
  ) {
    throw new SnapshotMismatchError(
      `snapshot cannot be restored here: shape was ${meta.shape.vcpus}/${meta.shape.memoryMiB}, here ${vcpus}/${memoryMiB}`,
    );
  }
  return guest;
}

async function makeRuntimeDir(spec: VmSpec): Promise<void> {
  await mkdir(spec.runtimeDir, { recursive: true });
  await writeFile(join(spec.runtimeDir, "console.log"), `fake guest ${spec.id} booted\n`);
}
