import type { SandboxRow } from "../../catalog/index.js";
import type { Slot } from "../../network/index.js";
import { ENVD_VERSION } from "../../protocol/index.js";
import type { Vm } from "../../vmm/index.js";
import { newId, newToken } from "../ids.js";
import type {
  PublicState,
  SandboxInfo,
  SandboxLifecycle,
  SandboxLogEntry,
  SandboxMetric,
  SandboxNetwork,
  SandboxVolumeMount,
} from "../types.js";

/** The orchestrator's own part of a catalog row (`SandboxRow.config`). */
export interface SandboxConfig {
  readonly network: SandboxNetwork;
  readonly allowInternetAccess: boolean;
  readonly lifecycle: SandboxLifecycle;
  readonly secure: boolean;
  /** Warren's own VM (a template build's): never listed. */
  readonly internal?: boolean;
  /** Paused without memory: its resume cold-boots from the disk, traffic never resumes it. */
  readonly pausedWithoutMemory?: boolean;
  /** Volumes its guest mounts (fork children and snapshots keep them). */
  readonly volumeMounts?: readonly SandboxVolumeMount[];
}

/** A sandbox the orchestrator tracks: its catalog row and, while running, its VM and slot. */
export interface LiveSandbox {
  row: SandboxRow;
  vm?: Vm;
  slot?: Slot;
  /** Gives back the team's share of capacity its VM holds (TeamQuotas). */
  releaseTeam?: () => void;
  /** Gives back the node's share (Capacity), or the warm pool VMM's it came from. */
  releaseNode?: () => void;
  /** Aborted by kill while a create or resume is in flight. */
  abort?: AbortController;
  /**
   * Calls to the guest of its current VM (metrics): aborted when the VM goes (pause, kill,
   * lost), so that none of them outlives it or waits on a guest that may never answer.
   */
  guestCalls?: AbortController;
  /** The NFS server of its volumes in its current slot (SandboxVms), while it has one. */
  volumes?: { close(): Promise<void> };
  readonly metrics: SandboxMetric[];
  /** Its VMM's CPU time at its last metrics sample (telemetry.ts: idle guests are not woken). */
  metricsMark?: MetricsMark;
  /** envd's log lines fetched so far (the last 1 000) and the newest one's seq. */
  envdLog?: { seq: number; readonly entries: SandboxLogEntry[] };
}

/** When a sandbox's last metrics sample was taken, and its VMM's CPU time then. */
export interface MetricsMark {
  /** The VM it was taken of: a resumed sandbox's new VMM starts its CPU time from 0. */
  readonly vm: Vm | undefined;
  readonly atMs: number;
  readonly cpuMs: number | undefined;
  /** Samples in a row repeated from the guest's last answer rather than asked of it. */
  readonly carried: number;
}

export function configOf(row: SandboxRow): SandboxConfig {
  return row.config as unknown as SandboxConfig;
}

/** The E2B API knows only running and paused; transitions show as the state they leave. */
export function publicState(row: SandboxRow): PublicState | undefined {
  switch (row.state) {
    case "running":
    case "pausing":
    case "killing":
      return "running";
    case "paused":
    case "resuming":
      return "paused";
    default:
      return undefined;
  }
}

export function sandboxInfo(row: SandboxRow): SandboxInfo {
  const config = configOf(row);
  return {
    sandboxId: row.id,
    teamId: row.teamId,
    templateId: row.templateId,
    alias: row.alias,
    clientId: row.clientId,
    state: publicState(row) ?? "running",
    metadata: row.metadata,
    startedAt: new Date(row.startedAt),
    endAt: new Date(row.endAt),
    cpuCount: row.vcpus,
    memoryMiB: row.memoryMiB,
    diskSizeMiB: row.diskSizeMiB,
    envdVersion: ENVD_VERSION,
    envdAccessToken: row.envdAccessToken,
    trafficAccessToken: row.trafficAccessToken,
    network: config.network,
    allowInternetAccess: config.allowInternetAccess,
    lifecycle: config.lifecycle,
    volumeMounts: (config.volumeMounts ?? []).map(({ name, path }) => ({ name, path })),
  };
}

export interface NewRowInput {
  readonly teamId: string;
  readonly templateId: string;
  readonly alias?: string;
  readonly shape: {
    readonly vcpus: number;
    readonly memoryMiB: number;
    readonly diskSizeMiB: number;
  };
  readonly metadata: Readonly<Record<string, string>>;
  readonly envVars: Readonly<Record<string, string>>;
  readonly config: SandboxConfig;
  readonly timeoutMs: number;
  /** The snapshot it starts from (and whose disk its overlay is stacked on). */
  readonly snapshotId: string;
}

/** A new sandbox's catalog row: fresh id and tokens, state creating. */
export function newRow(input: NewRowInput): SandboxRow {
  const now = new Date();
  return {
    id: newId(),
    teamId: input.teamId,
    templateId: input.templateId,
    alias: input.alias,
    state: "creating",
    clientId: "warren",
    envdAccessToken: input.config.secure ? newToken() : undefined,
    trafficAccessToken: input.config.network.allowPublicTraffic ? undefined : newToken(),
    vcpus: input.shape.vcpus,
    memoryMiB: input.shape.memoryMiB,
    diskSizeMiB: input.shape.diskSizeMiB,
    metadata: input.metadata,
    envVars: input.envVars,
    config: input.config as unknown as Record<string, unknown>,
    startedAt: now.toISOString(),
    endAt: new Date(now.getTime() + input.timeoutMs).toISOString(),
    snapshotId: input.snapshotId,
    updatedAt: now.toISOString(),
  };
}
