/**
 * The VMM driver seam: the orchestrator boots, snapshots and restores microVMs through this
 * interface and never sees QEMU. `qemu/` implements it; a Firecracker driver can later. How
 * snapshot disks stand on each other is not its concern but `DiskChains`' (disk-chains.ts).
 */

export type Accelerator = "kvm" | "tcg";

/** The guest's NIC: inside a network slot (tap in a netns) or QEMU user networking (dev only). */
export type VmNetwork =
  | { readonly kind: "tap"; readonly netns: string; readonly tap: string }
  | {
      readonly kind: "user";
      readonly forwards: ReadonlyArray<{ hostPort: number; guestPort: number }>;
    }
  | { readonly kind: "none" };

export interface GuestImages {
  readonly kernel: string;
  /** Identifies the kernel in snapshot metadata (a snapshot only restores on the same one). */
  readonly kernelVersion: string;
  /** Identifies this exact set of kernel, initramfs, agent drive, base disk and kernel flags (see images). */
  readonly fingerprint: string;
  readonly initramfs: string;
  readonly agentDrive: string;
  /** Kernel flags of the guest's boot (quietness, clock), part of `fingerprint`. */
  readonly kernelArgs?: string;
}

export interface MachineShape {
  readonly vcpus: number;
  readonly memoryMiB: number;
}

/**
 * Root disk size of a cold boot (the guest grows its filesystem to fill it); below the base
 * image's size the image's size is used. A restore keeps its snapshot's disk size.
 */
export interface DiskShape {
  readonly diskSizeMiB?: number;
}

export interface VmSpec {
  /** Names logs and runtime files; [a-z0-9]+. */
  readonly id: string;
  readonly shape: MachineShape & DiskShape;
  readonly images: GuestImages;
  /** The disk the VM boots from when cold: a read-only image its overlay is stacked on. */
  readonly baseDisk: string;
  readonly network: VmNetwork;
  /** Where the VM keeps its overlay, memory file and device state; removed by `destroy()`. */
  readonly runtimeDir: string;
  /** Guest address/gateway for the kernel command line (the slot's fixed guest address). */
  readonly guestIp: string;
  readonly guestGateway: string;
  readonly extraKernelArgs?: string;
}

/** A snapshot's files as sealed at capture (root's, read-only), with their checksums. */
export interface SnapshotFile {
  readonly name: string;
  readonly bytes: number;
  readonly sha256: string;
}

export interface SnapshotTiming {
  readonly pausedMs: number;
  readonly deviceStateMs: number;
  readonly memoryMs: number;
  readonly diskMs: number;
  readonly dirtyPages: number;
  /** The VMM stayed, stopped, for a `continue()` (asked with `keepStopped` and granted). */
  readonly keptStopped?: boolean;
}

export interface ExitInfo {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  /** False when the VMM died on its own rather than being stopped by us. */
  readonly expected: boolean;
  readonly reason: string;
}

export interface Vm {
  readonly id: string;
  readonly pid: number;
  readonly spec: VmSpec;
  /**
   * The end of the guest's serial console (kernel and init messages), bounded in size, with
   * what the guest printed up to now.
   */
  consoleTail(): Promise<string>;
  /**
   * CPU time its VMM process has used so far (all threads), ms; undefined when it cannot be
   * told. Read on the host, so asking never wakes the guest.
   */
  cpuTimeMs(): Promise<number | undefined>;
  /** Settles when the VMM process exits, for whatever reason. */
  readonly exited: Promise<ExitInfo>;
  /**
   * Captures the VM into `dir` (memory image, device state, frozen disk, meta.json) and seals
   * it (root's, read-only). With `resume`, the VM continues afterwards on a fresh overlay
   * (fork). With `keepStopped` (a pause whose VMM is kept for a quick resume), it stays
   * stopped on a fresh overlay until `continue()` or `destroy()`, where that is cheap (a
   * restored VM; a booted one's RAM would have to be copied, so it exits):
   * `SnapshotTiming.keptStopped` says which. Otherwise the VMM exits (pause) and its CPU
   * and private memory are released. A failed capture leaves the VM running.
   */
  snapshot(dir: string, opts: { resume: boolean; keepStopped?: boolean }): Promise<SnapshotTiming>;
  /** Runs a VM kept stopped by `snapshot(…, { keepStopped: true })` again. */
  continue(): Promise<void>;
  /** Stops the VMM and removes the runtime directory. */
  destroy(): Promise<void>;
  /**
   * Lets go of the VM, which runs on (held by the keeper) for the next server to reattach
   * (`VmmDriver.leftovers`); everything else is refused afterwards.
   */
  detach(): void;
}

/** A VM made again from a VMM that ran on while no server had it (`LeftoverVm.reattach`). */
export interface ReattachedVm {
  readonly vm: Vm;
  /** False when its vCPUs are stopped (a capture was under way): `continue()` runs it. */
  readonly running: boolean;
  /** The snapshot directory its root disk stands on now; undefined: the base image. */
  readonly diskSnapshotDir: string | undefined;
}

/** A VMM an earlier server left running (held by the keeper): to reattach or kill, at start. */
export interface LeftoverVm {
  /** Its VM id (a sandbox's id, for a sandbox's VM). */
  readonly id: string;
  readonly pid: number;
  /** What it was started with, from the record it left; undefined: it left none readable. */
  readonly spec: VmSpec | undefined;
  /**
   * A path to its network namespace that outlives the server's mounts (the keeper's open
   * descriptor), for a server whose `/run/netns` mount of it is gone.
   */
  readonly netnsHold?: string;
  /** Makes it a Vm of this driver again; refused when its record or its process do not hold. */
  reattach(): Promise<ReattachedVm>;
  /** Kills it, and gives back what it held. */
  kill(): Promise<void>;
}

/** A VM restored up to the point of loading its device state: the warm pool's unit. */
export interface PreparedRestore {
  readonly pid: number;
  /** Settles when its VMM exits, however (a warm pool drops one that died waiting). */
  readonly exited: Promise<ExitInfo>;
  /**
   * Runs the guest until `ready()` resolves (e.g. envd answered), then stops its vCPUs
   * again. Under TCG a fresh QEMU translates every code path the guest runs; a warmed VMM
   * has translated the hot ones, so `start()` is a bare `cont`. The guest's clock then lags
   * by the time it waited: the orchestrator's /init sets it.
   */
  warm(ready: () => Promise<void>): Promise<void>;
  /** Loads the device state (unless warmed) and resumes the guest. */
  start(): Promise<Vm>;
  /** Gives the VMM up without starting it. */
  discard(): Promise<void>;
}

export interface VmmDriver {
  readonly accel: Accelerator;
  /** Cold boot: kernel + initramfs + an overlay of the base disk + the agent drive. */
  boot(spec: VmSpec): Promise<Vm>;
  /**
   * Cold boot on a snapshot's disk: its memory and devices left aside, the guest starts
   * afresh from what the disk held (a filesystem-only resume, `onResume: 'reboot'`). The
   * snapshot must have been taken here (same checks and seals as a restore).
   */
  bootFromSnapshot(snapshotDir: string, spec: VmSpec): Promise<Vm>;
  /**
   * Starts a VM from a snapshot directory; the guest continues where it was captured. The
   * snapshot's files, and those of every snapshot it stands on, are checked against their
   * seals first (SnapshotTamperedError naming the first that differs).
   */
  restore(snapshotDir: string, spec: VmSpec): Promise<Vm>;
  /**
   * Spawns the VMM for a snapshot and waits; `start()` finishes the restore. `background`:
   * until `start()`, the VMM runs at low CPU priority (nice 10), so preparing spare VMMs
   * never slows the sandboxes in use.
   */
  prepareRestore(
    snapshotDir: string,
    spec: VmSpec,
    options?: { background?: boolean },
  ): Promise<PreparedRestore>;
  /**
   * Each file of a sealed snapshot with its SHA-256, for the catalog: restores are checked
   * against it. Separate from the capture, whose caller waits: hashing costs more than it.
   */
  checksumSnapshot(snapshotDir: string): Promise<readonly SnapshotFile[]>;
  /**
   * Why a boot of `spec` here would differ from the boot the snapshot's guest came from (its
   * kernel command line, e.g. after a settings change), or undefined when it would not. A
   * template with such drift still restores; it is just no longer what a rebuild would make.
   * Throws SnapshotMismatchError when the snapshot cannot be restored here at all (another
   * QEMU, CPU model or kernel: after an upgrade).
   */
  bootDrift(snapshotDir: string, spec: VmSpec): Promise<string | undefined>;
  /**
   * The VMMs an earlier server left running in the keeper, when this driver has one; each is
   * to be reattached or killed. Called once at start, before `killOrphans`.
   */
  leftovers(): readonly LeftoverVm[];
  /**
   * Kills VMMs an earlier run left behind (a crash, kill -9) whose runtime directories are
   * under `runDir`, and nothing else; those of the VMs in `keep` (reattached) are left
   * alone. Returns how many it killed. Called once at start.
   */
  killOrphans(runDir: string, keep?: ReadonlySet<string>): Promise<number>;
}
