import { rm } from "node:fs/promises";
import type { Catalog, SnapshotRow } from "../catalog/index.js";

/** Deletes a snapshot's files and its catalog row. */
export async function removeSnapshot(catalog: Catalog, snapshot: SnapshotRow): Promise<void> {
  await rm(snapshot.dir, { recursive: true, force: true });
  await catalog.deleteSnapshot(snapshot.id);
}

/**
 * Snapshot data is shared: a child snapshot's disk is stacked on its parent's, sandboxes run
 * on (or are paused as) a snapshot, templates point at one. Deletes `snapshotId` once nothing
 * uses it any more, then walks up to its parent. Template captures are kept (their template
 * decides). Returns the ids deleted.
 */
export async function releaseSnapshot(
  catalog: Catalog,
  snapshotId: string | undefined,
): Promise<string[]> {
  const deleted: string[] = [];
  let id = snapshotId;
  while (id) {
    const snapshot = await catalog.getSnapshot(id);
    if (!snapshot || snapshot.kind === "template") break;
    const users = await catalog.snapshotUsers(id);
    if (users.sandboxes.length + users.snapshots.length + users.templates.length > 0) break;
    await removeSnapshot(catalog, snapshot);
    deleted.push(id);
    id = snapshot.parentId;
  }
  return deleted;
}
