import { readFileSync } from "node:fs";
import { WarrenError } from "../shared/index.js";

/** How long an admitted VM counts as starting (its VMM's memory not yet in use). */
const STARTING_MS = 2_000;

import type { MachineShape } from "../vmm/index.js";

export interface CapacityLimits {
  readonly maxSandboxes: number;
  readonly maxVcpus: number;
  readonly maxMemoryMiB: number;
  /**
   * Host memory (MemAvailable) that admission never eats into: a VM is admitted only while
   * what is available, less a VMM's own need, stays above it. The guest-memory ratio above
   * counts what guests may use; this counts what the host has, so a burst of creates gets
   * 429s instead of the OOM killer. 0 turns it off.
   */
  readonly memoryReserveMiB?: number;
  /**
   * Free disk (the data dir's filesystem) a create never eats into (DiskSpace): below it,
   * 507 disk_pressure. 0 or unset turns it off.
   */
  readonly diskReserveMiB?: number;
}

/** What starting one more VMM takes at once, whatever its guest does later (QEMU, TCG cache). */
export const VMM_START_MIB = 256;

/** MemAvailable from /proc/meminfo, MiB; read on every admission (tens of microseconds). */
export function hostAvailableMiB(): number {
  const text = readFileSync("/proc/meminfo", "utf8");
  return Math.floor(Number(/^MemAvailable:\s+(\d+)/m.exec(text)?.[1] ?? 0) / 1024);
}

/**
 * Admission control for running sandboxes. A create or resume reserves its shape before
 * any work starts and gets 429 at once when the node is full, rather than a hung request;
 * its memory is checked again when its VMM starts (`starting`), after its turn in the queue.
 */
export class Capacity {
  #sandboxes = 0;
  #vcpus = 0;
  #memoryMiB = 0;
  readonly #reclaimers: ((shape: MachineShape) => boolean)[] = [];

  /** VMs admitted whose VMM has not started yet: their memory is not yet out of MemAvailable. */
  #starting = 0;

  constructor(
    readonly limits: CapacityLimits,
    /** The host's available memory, MiB (tests pass their own). */
    readonly availableMiB: () => number = hostAvailableMiB,
  ) {}

  /**
   * Who gives room back when a reserve would fail (paused sandboxes' kept VMMs, the warm
   * pool's, which only wait for a resume or a create): asked in the order they were added,
   * once per VM each may give up, until the reserve fits or none has one left.
   */
  reclaimWith(reclaim: (shape: MachineShape) => boolean): void {
    this.#reclaimers.push(reclaim);
  }

  /** Whether one more VM of this shape fits now, without reclaiming anything. */
  fits(shape: MachineShape): boolean {
    return this.#full(shape) === undefined;
  }

  /**
   * Reserves room for one VM; the returned function gives it back (idempotent). The VM may
   * wait for its start (StartQueue): `starting()` counts its memory when it begins.
   */
  reserve(shape: MachineShape): () => void {
    let full = this.#full(shape);
    while (full && this.#reclaimers.some((reclaim) => reclaim(shape))) full = this.#full(shape);
    if (full) {
      throw new WarrenError("capacity_exhausted", `node at capacity: ${full}; retry later`);
    }
    this.#checkMemory();
    return this.hold(shape);
  }

  /**
   * A reserved VM's VMM starts now: the host's memory is checked again (it may have gone
   * while the VM waited its turn; 429 memory_pressure) and the VMM counts as starting for a
   * moment, until its memory shows in MemAvailable.
   */
  starting(): void {
    this.#checkMemory();
    this.#starting += 1;
    const started = setTimeout(() => {
      this.#starting -= 1;
    }, STARTING_MS);
    started.unref();
  }

  /**
   * Counts a VM that runs already (one re-adopted after a restart), whatever the limits say
   * now: it holds its room whether or not it fits. The returned function gives it back.
   */
  hold(shape: MachineShape): () => void {
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

  /** Throws 429 memory_pressure when the host's memory cannot take one more VMM now. */
  #checkMemory(): void {
    const reserve = this.limits.memoryReserveMiB ?? 0;
    if (reserve <= 0) return;
    const available = this.availableMiB() - this.#starting * VMM_START_MIB;
    if (available - VMM_START_MIB < reserve) {
      throw new WarrenError(
        "memory_pressure",
        `host memory is low: ${available} MiB available, ${reserve} MiB kept in reserve; retry later`,
      );
    }
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
