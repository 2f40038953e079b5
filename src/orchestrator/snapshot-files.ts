import { rm } from "node:fs/promises";
import type { Catalog, SnapshotRow } from "../catalog/index.js";

/** Deletes a snapshot's files and its catalog row. */
export async function removeSnapshot(catalog: Catalog, snapshot: SnapshotRow): Promise<void> {
  await rm(snapshot.dir, { recursive: true, force: true });
  await catalog.deleteSnapshot(snapshot.id);
}
