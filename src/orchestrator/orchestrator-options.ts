import type { Logger } from "../shared/index.js";
import type { DiskChains, MachineShape } from "../vmm/index.js";
import type { CapacityLimits } from "./capacity.js";
import type { StatDisk } from "./disk-space.js";
import type { NodeDrivers } from "./node-drivers.js";
import type { PoolSettings } from "./pool/warm-pool.js";
import type { VolumeServer } from "./sandboxes/sandbox-vms.js";
import type { TeamLimitsLookup } from "./sandboxes/team-quotas.js";
import type { SharedSnapshots } from "./snapshots/snapshots.js";
import type { StartQueueSettings } from "./start-queue.js";

export interface OrchestratorOptions extends NodeDrivers {
  /** Where snapshot disks are flattened (the driver's disks: QemuDriverOptions.disks). */
  readonly disks: DiskChains;
  readonly limits: CapacityLimits;
  readonly templateShape: MachineShape;
  /** Captures the code-interpreter-v1 template after start, when setup built its rootfs. */
  readonly codeInterpreter?: boolean;
  /** Most children one fork call may ask for. */
  readonly maxForkCount: number;
  /** Disk layers above a template before a snapshot is flattened (Snapshots). */
  readonly flattenDepth: number;
  /** VMs brought up (restore and /init) at once; more creates, resumes and forks queue. */
  readonly maxConcurrentStarts: number;
  /** Bounds of that queue, in number and in time (StartQueue); unset: DEFAULT_START_QUEUE. */
  readonly startQueue?: StartQueueSettings;
  /** Warm pools: per template, sized from demand, bounded by memory (WarmPool). */
  readonly pool: PoolSettings;
  /** Paused sandboxes' VMMs kept stopped for a quick resume (KeptVmms); unset: none kept. */
  readonly keptVmms?: { readonly keepMs: number; readonly maxKept: number };
  readonly defaultTimeoutMs: number;
  readonly accelerator: { readonly accel: "kvm" | "tcg"; readonly reason: string };
  readonly logger: Logger;
  /** How long a start or resume waits for envd to answer /init. Default 30 s. */
  readonly envdDeadlineMs?: number;
  /**
   * How long a start keeps its start permit (maxConcurrentStarts) while its guest has not
   * answered /init; then the next start may begin. Default 10 s (START_PERMIT_LEASE_MS).
   */
  readonly startPermitLeaseMs?: number;
  /** How long the base template's guest settles after boot before its capture. Default 2 s. */
  readonly templateSettleMs?: number;
  /** The cluster's shared snapshot store: paused sandboxes may then resume on other nodes. */
  readonly shared?: SharedSnapshots;
  /** Background metrics sampling of running sandboxes (MetricsSampler); 0 or unset: off. */
  readonly metricsIntervalMs?: number;
  /** Each team's limits (the team catalog); unset: no team quotas. */
  readonly teamLimits?: TeamLimitsLookup;
  /** statfs of the data dir, for free-disk admission (tests pass their own). */
  readonly statDisk?: StatDisk;
  /** Serves volumes to sandboxes that mount them; unset: such creates are refused. */
  readonly volumes?: VolumeServer;
  /** The node's egress CA (PEM), which every guest trusts (network.rules); unset: none. */
  readonly guestCaCertificate?: string;
  /**
   * What `close()` does with running sandboxes, asked at the close (WARREN_ON_STOP, or the
   * signal that stops the server): pause them (default), or detach them, left running in
   * the keeper for the next server to re-adopt.
   */
  readonly onStop?: () => "pause" | "detach";
}
