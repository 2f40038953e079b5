import type { SandboxRow } from "../catalog/index.js";
import type { NetworkSlot } from "../network/index.js";
import { ENVD_VERSION } from "../protocol/index.js";
import type { Vm } from "../vmm/index.js";
import type {
  PublicState,
  SandboxInfo,
  SandboxLifecycle,
  SandboxMetric,
  SandboxNetwork,
} from "./types.js";

/** The orchestrator's own part of a catalog row (`SandboxRow.config`). */
export interface SandboxConfig {
  readonly network: SandboxNetwork;
  readonly allowInternetAccess: boolean;
  readonly lifecycle: SandboxLifecycle;
  readonly secure: boolean;
}

/** A sandbox the orchestrator tracks: its catalog row and, while running, its VM and slot. */
export interface LiveSandbox {
  row: SandboxRow;
  vm?: Vm;
  slot?: NetworkSlot;
  releaseCapacity?: () => void;
  ttlTimer?: NodeJS.Timeout;
  /** Aborted by kill while a create or resume is in flight. */
  abort?: AbortController;
  readonly metrics: SandboxMetric[];
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
  };
}
