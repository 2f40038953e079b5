/**
 * The snapshot-disk seam: a snapshot's frozen disk stands on the one below it (its parent
 * snapshot's, down to the base image), and a long chain costs every read a walk through its
 * layers. The orchestrator shortens chains through this interface; how a disk stands on
 * another is the implementation's business (`qemu/qcow2-disk-chains.ts`: qcow2 backing
 * files), never the orchestrator's or the driver interface's.
 */
import type { SnapshotFile } from "./driver.js";

/** A flatten done aside: `files` are the snapshot's files once `commit()` puts it in place. */
export interface FlattenPlan {
  readonly files: readonly SnapshotFile[];
  commit(): Promise<void>;
  discard(): Promise<void>;
}

export interface DiskChains {
  /**
   * Restacks a snapshot's frozen disk directly on an ancestor snapshot's disk (everything the
   * layers in between wrote is copied in); reads then no longer walk those layers, and they
   * can be deleted once nothing else uses them. Guest-visible content is unchanged. Nothing
   * is replaced until `commit()`: the caller records the new files' checksums first.
   */
  flatten(snapshotDir: string, ontoDir: string): Promise<FlattenPlan>;
  /**
   * At start, for a snapshot whose flatten a crash interrupted: finishes it if the catalog
   * already records its result (`recordedMetaSha256`: the meta.json checksum it holds),
   * drops it otherwise. True when it finished one.
   */
  finishFlatten(snapshotDir: string, recordedMetaSha256: string | undefined): Promise<boolean>;
}
