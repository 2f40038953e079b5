import type { Logger } from "../../shared/index.js";
import type { Accelerator } from "../driver.js";
import { type AccelChoice, chooseAccelerator } from "./accel-choice.js";
import { VmCgroups } from "./cgroups.js";
import { QemuDriver, type QemuDriverOptions, qemuVersion } from "./driver.js";
import type { KeeperClient } from "./keeper-client.js";
import { enableKsm } from "./memory-merge.js";
import { Qcow2DiskChains } from "./qcow2-disk-chains.js";
import { VmmIdentities } from "./vmm-ids.js";

/** What a node's QEMU is set up from: its slice of the server's settings. */
export interface QemuDriverConfig {
  /** Configured accelerator; "auto" probes once per host (cached in `accelCacheFile`). */
  readonly accel: Accelerator | "auto";
  /** The guest kernel and initramfs the probe boots. */
  readonly kernel: string;
  readonly initramfs: string;
  readonly accelCacheFile: string;
  /**
   * The guest images directory: snapshots' disk chains end on an image inside it, and a
   * record naming any other file is refused.
   */
  readonly imagesDir: string;
  /** The server's cgroup for its VMs (one per server on a host: named by its network prefix). */
  readonly cgroupName: string;
  /**
   * The keeper that spawns and holds every VMM (and sweeps the VMs' cgroups and runs the
   * watchdog: the VMMs die with it, not with the server). What it held for an earlier
   * server is the caller's to reattach or kill (`KeeperClient.held()`).
   */
  readonly keeper: KeeperClient;
  /** Where QEMU binds each VM's QMP socket, out of every jail (QemuDriverOptions.qmpDir). */
  readonly qmpDir: string;
  /** A uid of its own per running VM, from this range. */
  readonly vmmUidBase: number;
  readonly vmmUidCount: number;
  readonly tcgCacheMiB: number;
  /** Undefined: the driver's default (off under TCG). */
  readonly guestAslr?: boolean;
  /** KSM over every VMM's memory (WARREN_KSM=on): started host-wide here. */
  readonly mergeMemory: boolean;
  readonly sealedFiles: QemuDriverOptions["sealedFiles"];
  readonly logger: Logger;
  /**
   * Benchmarks only (`npm run bench:warren` reports what containment costs): QEMU as root,
   * no uid, chroot or cgroup, seals unchecked. Code sets it, never a setting.
   */
  readonly uncontainedForBenchmarks?: boolean;
}

export interface QemuDriverSetup {
  readonly driver: QemuDriver;
  /** The qcow2 chains the driver makes overlays with; the orchestrator flattens through them. */
  readonly disks: Qcow2DiskChains;
  readonly accelerator: AccelChoice;
  readonly qemuVersion: string;
  /**
   * Once what exited VMMs held is given back (their cgroups removed), lets go of the keeper:
   * VMMs still running stay with it, for the next server.
   */
  close(): Promise<void>;
}

/**
 * A node's VMM driver with its containment: QEMU's version and accelerator, KSM when asked,
 * the VMs' cgroups, a uid per VM, and QEMU spawned by the keeper (whose watchdog kills every
 * VM when the keeper dies, however it ends; a server's death leaves them running).
 */
export async function createQemuDriver(config: QemuDriverConfig): Promise<QemuDriverSetup> {
  const { logger } = config;
  const version = await qemuVersion();
  const accelerator = await chooseAccelerator({
    configured: config.accel,
    kernel: config.kernel,
    initramfs: config.initramfs,
    qemuVersion: version,
    cacheFile: config.accelCacheFile,
  });
  if (config.mergeMemory) await enableKsm();
  const uncontained = config.uncontainedForBenchmarks === true;
  if (uncontained) logger.warn({}, "vmm.uncontained: for a benchmark only, VMs run as root");
  const cgroups = uncontained ? undefined : VmCgroups.detect(config.cgroupName);
  if (!cgroups && !uncontained) logger.warn({}, "vmm.no_cgroups: VMs run without cgroup limits");
  const identities = new VmmIdentities(config.vmmUidBase, config.vmmUidCount);
  const disks = new Qcow2DiskChains({ imagesDir: config.imagesDir, identities });
  const driver = new QemuDriver({
    accel: accelerator.accel,
    disks,
    qemuVersion: version,
    identities: uncontained ? undefined : identities,
    cgroups,
    tcgCacheMiB: config.tcgCacheMiB,
    guestAslr: config.guestAslr,
    mergeMemory: config.mergeMemory,
    sealedFiles: uncontained ? undefined : config.sealedFiles,
    qmpDir: config.qmpDir,
    keeper: config.keeper,
  });
  const close = async () => {
    await driver.settled();
    config.keeper.close();
  };
  return { driver, disks, accelerator, qemuVersion: version, close };
}
