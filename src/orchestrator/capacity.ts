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

  constructor(readonly limits: CapacityLimits) {}

  /** Reserves room for one VM; the returned function gives it back (idempotent). */
  reserve(shape: MachineShape): () => void {
    const full =
      this.#sandboxes + 1 > this.limits.maxSandboxes
        ? `${this.limits.maxSandboxes} sandboxes are running`
        : this.#vcpus + shape.vcpus > this.limits.maxVcpus
          ? `${this.#vcpus} of ${this.limits.maxVcpus} vCPUs are in use`
          : this.#memoryMiB + shape.memoryMiB > this.limits.maxMemoryMiB
            ? `${this.#memoryMiB} of ${this.limits.maxMemoryMiB} MiB of guest memory are in use`
            : undefined;
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

  get usage(): { sandboxes: number; vcpus: number; memoryMiB: number } {
    return { sandboxes: this.#sandboxes, vcpus: this.#vcpus, memoryMiB: this.#memoryMiB };
  }
}
