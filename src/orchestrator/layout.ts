import { chmod, mkdir } from "node:fs/promises";
import { join } from "node:path";

/** Where the orchestrator keeps its files under the data directory. */
export interface StateLayout {
  readonly dataDir: string;
  readonly catalog: string;
  /** One directory per snapshot (template captures, pauses, forks): readable by the VMM account. */
  readonly snapshotsDir: string;
  /** Per-VM runtime directories (sockets, overlay, RAM file, console log). */
  readonly runDir: string;
  readonly secretsDir: string;
}

export function stateLayout(dataDir: string): StateLayout {
  return {
    dataDir,
    catalog: join(dataDir, "catalog.sqlite"),
    snapshotsDir: join(dataDir, "snapshots"),
    runDir: join(dataDir, "run"),
    secretsDir: join(dataDir, "secrets"),
  };
}

/**
 * Creates the data directory's tree with the modes the unprivileged VMM account needs: it
 * traverses the data dir and `run/` to its own runtime dir, and reads snapshot files. Done
 * before anything else is created in it: a `mkdir -p` of a private subdirectory (secrets,
 * catalog) would otherwise make the data dir itself 0700 on a fresh host.
 */
export async function ensureLayout(layout: StateLayout): Promise<void> {
  await mkdir(layout.dataDir, { recursive: true });
  await chmod(layout.dataDir, 0o711);
  await mkdir(layout.snapshotsDir, { recursive: true });
  await chmod(layout.snapshotsDir, 0o755);
  await mkdir(layout.runDir, { recursive: true });
  await chmod(layout.runDir, 0o711);
}

export function snapshotDir(layout: StateLayout, snapshotId: string): string {
  return join(layout.snapshotsDir, snapshotId);
}

export function runtimeDir(layout: StateLayout, vmId: string): string {
  return join(layout.runDir, vmId);
}
