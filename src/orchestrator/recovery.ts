import { readdir, rm } from "node:fs/promises";
import type { Catalog, SandboxRow } from "../catalog/index.js";
import type { Logger } from "../shared/index.js";
import type { VmmDriver } from "../vmm/index.js";
import type { StateLayout } from "./layout.js";
import type { LifecycleEvents } from "./lifecycle-events.js";
import type { Snapshots } from "./snapshots/snapshots.js";

export interface RecoveryOptions {
  readonly catalog: Catalog;
  readonly driver: Pick<VmmDriver, "killOrphans">;
  readonly layout: StateLayout;
  readonly snapshots: Snapshots;
  readonly logger: Logger;
  readonly events: LifecycleEvents;
  /** Sandboxes re-adopted already (reattach.ts): left as they are, runtime dirs and all. */
  readonly reattached?: ReadonlySet<string>;
}

/**
 * At start, after the running sandboxes whose VMMs the keeper held were re-adopted
 * (reattach.ts, `reattached`): the other sandboxes an earlier server left running (or
 * mid-transition) are reported lost: any VMM still alive of theirs is killed, runtime
 * directories removed, and their rows marked killed with the reason. Two transitions had
 * already saved the whole sandbox and end paused instead: a pause whose capture is
 * recorded, and a resume (its snapshot is untouched until the resume completes). Paused sandboxes are untouched: their snapshots are on disk.
 * Snapshots nothing uses any more (e.g. layers a flatten made redundant) are deleted, and so
 * are snapshot directories without a row (a capture cut short).
 */
export async function recoverLeftovers(options: RecoveryOptions): Promise<void> {
  const { catalog, driver, layout, snapshots, logger } = options;
  const reattached = options.reattached ?? new Set<string>();
  const killed = await driver.killOrphans(layout.runDir, reattached);
  if (killed > 0) logger.warn({ count: killed }, "recovery.vmm_killed");
  const stopped = await catalog.listSandboxes([
    "creating",
    "running",
    "pausing",
    "resuming",
    "killing",
  ]);
  for (const row of stopped) {
    if (reattached.has(row.id)) continue;
    const pausedOn = await savedSnapshot(catalog, row);
    if (pausedOn) await markPaused(options, row, pausedOn);
    else await markLost(options, row);
  }
  const finished = await snapshots.finishFlattens();
  if (finished > 0) logger.info({ count: finished }, "recovery.flattens_finished");
  const swept = await snapshots.sweep();
  if (swept > 0) logger.info({ count: swept }, "recovery.snapshots_deleted");
  const unrecorded = await snapshots.removeUnrecorded();
  if (unrecorded > 0) logger.warn({ count: unrecorded }, "recovery.snapshot_dirs_removed");
  // Last: only what is kept is worth hashing (captures sealed before the crash, unhashed).
  const checksummed = await snapshots.checksumUnrecorded();
  if (checksummed > 0) logger.info({ count: checksummed }, "recovery.snapshots_checksummed");
  for (const entry of await readdir(layout.runDir).catch(() => [] as string[])) {
    if (reattached.has(entry)) continue;
    await rm(`${layout.runDir}/${entry}`, { recursive: true, force: true });
  }
}

/**
 * The snapshot that holds the whole of a sandbox stopped mid-transition, if one does: a
 * resuming sandbox's pause snapshot (only read by the restore), or the capture a pause
 * recorded before the server died (its row is written once every file is).
 */
async function savedSnapshot(catalog: Catalog, row: SandboxRow): Promise<string | undefined> {
  if (!row.snapshotId) return undefined;
  if (row.state === "resuming") return row.snapshotId;
  if (row.state !== "pausing") return undefined;
  const captures = await catalog.listSnapshots({ sandboxId: row.id });
  // The pause stacks its capture on what the sandbox stood on.
  return captures.find((s) => s.kind === "pause" && s.parentId === row.snapshotId)?.id;
}

async function markPaused(
  options: RecoveryOptions,
  row: SandboxRow,
  snapshotId: string,
): Promise<void> {
  const { catalog, events } = options;
  await catalog.updateSandbox(row.id, { state: "paused", snapshotId });
  await events.emit("sandbox.recovered_paused", {
    sandboxId: row.id,
    state: row.state,
    snapshotId,
  });
}

/** Marks a sandbox the server's end took with it killed, saying why. */
export async function markLost(
  options: Pick<RecoveryOptions, "catalog" | "snapshots" | "events">,
  row: SandboxRow,
  why?: string,
): Promise<void> {
  const { catalog, snapshots, events } = options;
  const reason = `lost: ${why ?? `the server stopped while the sandbox was ${row.state}`}`;
  await catalog.updateSandbox(row.id, {
    state: "killed",
    endedReason: reason,
    snapshotId: undefined,
  });
  await snapshots.release(row.snapshotId);
  await events.emit("sandbox.lost", {
    sandboxId: row.id,
    state: row.state,
    ...(why && { reason }),
  });
}
