/**
 * FakeDiskChains: a STAND-IN for Qcow2DiskChains in orchestrator unit tests. Fake snapshots
 * have no disk to restack: a flatten is a plan held in memory until it is committed,
 * discarded, or (after a crash) finished or dropped by `finishFlatten` against the checksum
 * the catalog recorded, as the real one does with its files set aside.
 */
import type { DiskChains, FlattenPlan, SnapshotFile } from "../../src/vmm/index.js";

/** The meta.json a fake flatten writes: its checksum is what a catalog records for it. */
export const FLATTENED_META: SnapshotFile = { name: "meta.json", bytes: 0, sha256: "f".repeat(64) };

export class FakeDiskChains implements DiskChains {
  /** Flattens committed (or finished at a start), in order. */
  readonly flattened: { snapshotDir: string; ontoDir: string }[] = [];
  /** Plans prepared and neither committed nor discarded, by snapshot directory. */
  readonly #pending = new Map<string, string>();

  async flatten(snapshotDir: string, ontoDir: string): Promise<FlattenPlan> {
    this.#pending.set(snapshotDir, ontoDir);
    return {
      files: [FLATTENED_META],
      commit: async () => this.#commit(snapshotDir),
      discard: async () => {
        this.#pending.delete(snapshotDir);
      },
    };
  }

  async finishFlatten(
    snapshotDir: string,
    recordedMetaSha256: string | undefined,
  ): Promise<boolean> {
    if (!this.#pending.has(snapshotDir)) return false;
    if (recordedMetaSha256 !== FLATTENED_META.sha256) {
      this.#pending.delete(snapshotDir);
      return false;
    }
    this.#commit(snapshotDir);
    return true;
  }

  #commit(snapshotDir: string): void {
    const ontoDir = this.#pending.get(snapshotDir);
    if (ontoDir === undefined) return;
    this.#pending.delete(snapshotDir);
    this.flattened.push({ snapshotDir, ontoDir });
  }
}
