import type { Slot } from "../../src/network/index.js";
import type { VolumeServer } from "../../src/orchestrator/index.js";
import { WarrenError } from "../../src/shared/index.js";

/**
 * Stands in for the volumes' NFS server (which needs root and a slot's namespace): it
 * records which volumes are served in which slot, and every serving ever started, so that
 * tests see a sandbox's volumes follow its VM from slot to slot and go with it.
 */
export class FakeVolumeServer implements VolumeServer {
  /** Servings open now, by slot. */
  readonly open = new Map<Slot, readonly string[]>();
  /** Every serving started, in order. */
  readonly started: { readonly slot: Slot; readonly volumeIds: readonly string[] }[] = [];
  /** Volumes to refuse as the real one refuses a destroyed volume's. */
  readonly gone = new Set<string>();
  /** Volumes' teams, when a test says: another team's is refused as the real one does. */
  readonly teams = new Map<string, string>();

  async serve(
    slot: Slot,
    volumeIds: readonly string[],
    teamId: string,
  ): Promise<{ close(): Promise<void> }> {
    const missing = volumeIds.find(
      (id) => this.gone.has(id) || (this.teams.get(id) ?? teamId) !== teamId,
    );
    if (missing) throw new WarrenError("volume_not_found", `volume "${missing}" no longer exists`);
    if (this.open.has(slot)) throw new Error(`slot ${slot.netns} serves volumes already`);
    this.open.set(slot, volumeIds);
    this.started.push({ slot, volumeIds });
    return {
      close: async () => {
        this.open.delete(slot);
      },
    };
  }
}
