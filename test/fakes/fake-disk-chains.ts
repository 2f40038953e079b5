/**
 * FakeDiskChains: a STAND-IN for Qcow2DiskChains in orchestrator unit tests. Fake snapshots
 * have no disk: which snapshot stands on which is a map a test fills (`stack`), and a flatten
 * is a plan held in memory until it is committed, discarded, or (after a crash) finished or
 * dropped by `finishFlatten` against the checksum the catalog recorded, as the real one does
 * with its files set aside. A flatten onto a snapshot not below (or of a chain it was never
 * told of) is refused, as the real one refuses a chain it cannot read.
 */
import {
  type DiskChains,
  type FlattenPlan,
  type SnapshotFile,
  VmmError,
} from "../../src/vmm/index.js";

/** The meta.json a fake flatten writes: its checksum is what a catalog records for it. */
export const FLATTENED_META: SnapshotFile = { name: "meta.json", bytes: 0, sha256: "f".repeat(64) };

export class FakeDiskChains implements DiskChains {
  /** Each snapshot's disk's backing snapshot, by directory. */
  readonly #backing = new Map<string, string>();
  /** Plans prepared and neither committed nor discarded: snapshot directory → onto. */
  readonly #pending = new Map<string, string>();

  /** Records that `snapshotDir`'s disk stands on `ontoDir`'s (what a capture records). */
  stack(snapshotDir: string, ontoDir: string): void {
    this.#backing.set(snapshotDir, ontoDir);
  }

  backingOf(snapshotDir: string): string | undefined {
    return this.#backing.get(snapshotDir);
  }

  async flatten(snapshotDir: string, ontoDir: string): Promise<FlattenPlan> {
    if (!this.#below(snapshotDir, ontoDir))
      throw new VmmError(`flattening ${snapshotDir} onto ${ontoDir} failed: not below it`);
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

  /** Whether `ontoDir` lies below `snapshotDir`'s own disk in its chain. */
  #below(snapshotDir: string, ontoDir: string): boolean {
    for (let at = this.#backing.get(snapshotDir); at !== undefined; at = this.#backing.get(at))
      if (at === ontoDir) return true;
    return false;
  }

  #commit(snapshotDir: string): void {
    const ontoDir = this.#pending.get(snapshotDir);
    if (ontoDir === undefined) return;
    this.#pending.delete(snapshotDir);
    this.#backing.set(snapshotDir, ontoDir);
  }
}
