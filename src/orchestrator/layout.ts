import { join } from "node:path";

/** Where the orchestrator keeps its files under the data directory. */
export interface StateLayout {
  readonly catalog: string;
  /** One directory per snapshot (template captures, pauses, forks): readable by the VMM account. */
  readonly snapshotsDir: string;
  /** Per-VM runtime directories (sockets, overlay, RAM file, console log). */
  readonly runDir: string;
  readonly secretsDir: string;
}

export function stateLayout(dataDir: string): StateLayout {
  return {
    catalog: join(dataDir, "catalog.sqlite"),
    snapshotsDir: join(dataDir, "snapshots"),
    runDir: join(dataDir, "run"),
    secretsDir: join(dataDir, "secrets"),
  };
}

export function snapshotDir(layout: StateLayout, snapshotId: string): string {
  return join(layout.snapshotsDir, snapshotId);
}

export function runtimeDir(layout: StateLayout, vmId: string): string {
  return join(layout.runDir, vmId);
}
