import type { Slot } from "../../network/index.js";
import type { Logger } from "../../shared/index.js";
import type { Vm } from "../../vmm/index.js";

/**
 * A paused sandbox's VMM, stopped after its capture with its network slot and its share of
 * the node's capacity: resuming it is a `cont` (its translated code still warm under TCG)
 * instead of a restore.
 */
export interface KeptVmm {
  readonly sandboxId: string;
  /** The pause's snapshot: the VMM is what that snapshot holds, and nothing later. */
  readonly snapshotId: string;
  readonly vm: Vm;
  readonly slot: Slot;
  readonly releaseNode: () => void;
}

export interface KeptVmmsOptions {
  /** How long a VMM is kept after its pause; 0 keeps none. */
  readonly keepMs: number;
  /** Most VMMs kept at once: the oldest goes first. */
  readonly maxKept: number;
  /** Gives a kept VMM's VM and slot back (not its capacity: that is given back here). */
  readonly release: (kept: KeptVmm) => Promise<void>;
  readonly logger: Logger;
}

type Reason =
  | "expired"
  | "full"
  | "capacity"
  | "stale"
  | "killed"
  | "reboot"
  | "exited"
  | "closing";

/**
 * The VMMs paused sandboxes left stopped, for a while. The snapshot each pause wrote is
 * whole all the same: a VMM given up (its time out, room needed, the server stopping, a
 * crash) only makes that sandbox's next resume a restore.
 */
export class KeptVmms {
  readonly #o: KeptVmmsOptions;
  /** By sandbox id, oldest first (Map order). */
  readonly #kept = new Map<string, { kept: KeptVmm; timer: NodeJS.Timeout }>();
  /** Releases in flight, by sandbox id: its runtime directory is not free before they end. */
  readonly #releasing = new Map<string, Promise<void>>();
  #closed = false;

  constructor(options: KeptVmmsOptions) {
    this.#o = options;
  }

  /** Whether a pause may keep its VMM now. */
  get enabled(): boolean {
    return !this.#closed && this.#o.keepMs > 0 && this.#o.maxKept > 0;
  }

  get size(): number {
    return this.#kept.size;
  }

  keep(kept: KeptVmm): void {
    this.#evict(kept.sandboxId, "stale");
    if (!this.enabled) {
      this.#release(kept, "closing");
      return;
    }
    for (const oldest of this.#kept.keys()) {
      if (this.#kept.size < this.#o.maxKept) break;
      this.#evict(oldest, "full");
    }
    const timer = setTimeout(() => this.#evict(kept.sandboxId, "expired"), this.#o.keepMs);
    timer.unref();
    this.#kept.set(kept.sandboxId, { kept, timer });
    void kept.vm.exited.then(() => {
      if (this.#kept.get(kept.sandboxId)?.kept === kept) this.#evict(kept.sandboxId, "exited");
    });
  }

  /**
   * The sandbox's kept VMM, taken out, if it holds `snapshotId`; one that holds anything
   * else (the sandbox paused again elsewhere since) is given up. Without one, resolves once
   * no release of the sandbox's is in flight: its restore may then use its runtime directory.
   */
  async take(sandboxId: string, snapshotId: string): Promise<KeptVmm | undefined> {
    const entry = this.#kept.get(sandboxId);
    if (entry?.kept.snapshotId === snapshotId) {
      clearTimeout(entry.timer);
      this.#kept.delete(sandboxId);
      return entry.kept;
    }
    this.#evict(sandboxId, "stale");
    await this.#releasing.get(sandboxId);
    return undefined;
  }

  /** Gives the sandbox's kept VMM up (its kill), once it is gone. */
  async drop(sandboxId: string, reason: Reason = "killed"): Promise<void> {
    this.#evict(sandboxId, reason);
    await this.#releasing.get(sandboxId);
  }

  /**
   * A reserve that would fail takes the oldest kept VMM's room (Capacity.reclaimWith): its
   * share is given back at once, the VMM goes in the background.
   */
  reclaimOne(): boolean {
    const oldest = this.#kept.keys().next();
    if (oldest.done) return false;
    this.#evict(oldest.value, "capacity");
    return true;
  }

  /** Resolves once no kept VMM is being given up. */
  async settled(): Promise<void> {
    await Promise.all(this.#releasing.values());
  }

  /** Keeps no more, gives up every kept VMM and waits until they are gone. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const sandboxId of [...this.#kept.keys()]) this.#evict(sandboxId, "closing");
    await this.settled();
  }

  #evict(sandboxId: string, reason: Reason): void {
    const entry = this.#kept.get(sandboxId);
    if (!entry) return;
    clearTimeout(entry.timer);
    this.#kept.delete(sandboxId);
    void this.#release(entry.kept, reason);
  }

  /** Capacity back at once (a reclaim's caller reserves right after), VM and slot after. */
  #release(kept: KeptVmm, reason: Reason): Promise<void> {
    kept.releaseNode();
    this.#o.logger.info({ sandboxId: kept.sandboxId, reason }, "sandbox.kept_vmm_released");
    const released = this.#o
      .release(kept)
      .catch((err: unknown) =>
        this.#o.logger.warn({ sandboxId: kept.sandboxId, err }, "sandbox.kept_vmm_release_failed"),
      )
      .finally(() => {
        if (this.#releasing.get(kept.sandboxId) === released)
          this.#releasing.delete(kept.sandboxId);
      });
    this.#releasing.set(kept.sandboxId, released);
    return released;
  }
}
