import type { OrchestratorParts } from "./assembly.js";
import { ensureLayout } from "./layout.js";
import type { OrchestratorOptions } from "./orchestrator-options.js";
import { reattachRunning } from "./reattach.js";
import { recoverLeftovers } from "./recovery.js";

/**
 * A node's start, in order: what runs on in the keeper taken back before anything is
 * cleaned, an earlier run's leftovers recovered, the slots, the paused sandboxes, then `base`
 * and its warm pool. Counts what it found.
 */
export async function startParts(
  options: OrchestratorOptions,
  p: OrchestratorParts,
): Promise<{ reattached: number; paused: number }> {
  const { catalog, driver, slots, layout, logger } = options;
  await ensureLayout(layout);
  const reattached = await reattachRunning({
    catalog,
    driver,
    slots,
    vms: p.vms,
    lifecycle: p.lifecycle,
    snapshots: p.snapshots,
    layout,
    events: p.events,
    logger,
  });
  await recoverLeftovers({
    catalog,
    driver,
    layout,
    snapshots: p.snapshots,
    logger,
    events: p.events,
    reattached,
  });
  await slots.cleanupStale();
  await slots.start();
  const paused = await catalog.listSandboxes(["paused"]);
  for (const row of paused) p.table.add({ row, metrics: [] });
  const base = await p.templates.ensureBase();
  const baseSnapshot = await catalog.getSnapshot(base.snapshotId);
  if (baseSnapshot) {
    const pooled = { snapshotId: base.snapshotId, dir: baseSnapshot.dir, shape: base };
    p.pool.keepWarm(pooled, options.pool.baseFloor);
  }
  return { reattached: reattached.size, paused: paused.length };
}
