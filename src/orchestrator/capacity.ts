import { WarrenError } from "../shared/index.js";
import type { MachineShape } from "../vmm/index.js";

export interface CapacityLimits {
  readonly maxSandboxes: number;
  readonly maxVcpus: number;
  readonly maxMemoryMiB: number;
}

/**
 * Admission control for running sandboxes. A create or resume reserves its shape before
 * any work starts and gets 429 at once when the node is full, rather than a hung request.
 */
export class Capacity {
  #sandboxes = 0;
  #vcpus = 0;
  #memoryMiB = 0;
  #reclaim: ((shape: MachineShape) => boolean) | undefined;

  constructor(readonly limits: CapacityLimits) {}

  /**
   * Who gives room back when a reserve would fail (the warm pool, whose VMMs only wait for
   * a create): asked once per VM it may give up, until the reserve fits or it has none.
   */
  reclaimWith(reclaim: (shape: MachineShape) => boolean): void {
    this.#reclaim = reclaim;
  }

  /** Whether one more VM of this shape fits now, without reclaiming anything. */
  fits(shape: MachineShape): boolean {
    return this.#full(shape) === undefined;
  }

  /** Reserves room for one VM; the returned function gives it back (idempotent). */
  reserve(shape: MachineShape): () => void {
    let full = this.#full(shape);
    while (full && this.#reclaim?.(shape)) full = this.#full(shape);
    if (full) {
      throw new WarrenError("capacity_exhausted", `node at capacity: ${full}; retry later`);
    }
    this.#sandboxes += 1;
    this.#vcpus += shape.vcpus;
    this.#memoryMiB += shape.memoryMiB;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#sandboxes -= 1;
      this.#vcpus -= shape.vcpus;
      this.#memoryMiB -= shape.memoryMiB;
    };
  }

  /** What stands in the way of one more VM of this shape, or undefined if it fits. */
  #full(shape: MachineShape): string | undefined {
    return this.#sandboxes + 1 > this.limits.maxSandboxes
      ? `${this.limits.maxSandboxes} sandboxes are running`
      : this.#vcpus + shape.vcpus > this.limits.maxVcpus
        ? `${this.#vcpus} of ${this.limits.maxVcpus} vCPUs are in use`
        : this.#memoryMiB + shape.memoryMiB > this.limits.maxMemoryMiB
          ? `${this.#memoryMiB} of ${this.limits.maxMemoryMiB} MiB of guest memory are in use`
          : undefined;
  }

  get usage(): { sandboxes: number; vcpus: number; memoryMiB: number } {
    return { sandboxes: this.#sandboxes, vcpus: this.#vcpus, memoryMiB: this.#memoryMiB };
  }
}
