import { readFile } from "node:fs/promises";
import type { GuestArtifacts } from "../images/index.js";
import type { Slot, SlotPool } from "../network/index.js";
import type { Logger } from "../shared/index.js";
import type { MachineShape, PreparedRestore, VmmDriver } from "../vmm/index.js";
import type { Capacity } from "./capacity.js";
import type { GuestAgent } from "./guest-agent.js";
import { newId } from "./ids.js";
import { runtimeDir, type StateLayout } from "./layout.js";
import { guestSpec } from "./vm-spec.js";

/** A VMM restored from a template, run once until envd answered, then stopped: ready to `start()`. */
export interface WarmVm {
  /** The id the sandbox that takes it will have (its runtime dir is named after it). */
  readonly id: string;
  readonly slot: Slot;
  readonly prepared: PreparedRestore;
  /** Its share of the node's capacity, handed over to the sandbox that takes it. */
  readonly releaseCapacity: () => void;
}

export interface WarmPoolOptions {
  readonly driver: VmmDriver;
  readonly slots: SlotPool;
  readonly agent: GuestAgent;
  readonly images: GuestArtifacts;
  readonly layout: StateLayout;
  readonly capacity: Capacity;
  readonly logger: Logger;
  /** Warmed VMMs kept per template. 0 disables the pool. */
  readonly size: number;
  /** Below this much available host memory, pooled VMMs are given up and none are made. */
  readonly minAvailableMiB: number;
}

interface Target {
  readonly snapshotId: string;
  readonly dir: string;
  readonly shape: MachineShape;
  readonly ready: WarmVm[];
}

const PRESSURE_CHECK_MS = 5_000;
const RETRY_AFTER_FAILURE_MS = 5_000;
/**
 * A refill waits this long after a take: a QEMU starting (before it is reniced) and the
 * server preparing its files compete for the CPU with the create's /init and first command
 * (on 2 cores under TCG: /init ~100 ms instead of ~50).
 */
const REFILL_DELAY_MS = 1_000;

/**
 * Per-template pools of warmed VMMs in their own network slots. A create takes one when
 * there is one (then only a `cont` and /init remain) and falls back to a plain restore
 * otherwise; taking one starts a refill in the background soon after. Pooled VMMs count
 * against capacity and are given up when host memory runs low.
 */
export class WarmPool {
  readonly #o: WarmPoolOptions;
  readonly #targets = new Map<string, Target>();
  #filling: Promise<void> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(options: WarmPoolOptions) {
    this.#o = options;
  }

  /** Keeps `size` warmed VMMs of this snapshot from now on. */
  keepWarm(snapshotId: string, dir: string, shape: MachineShape): void {
    if (this.#o.size <= 0 || this.#targets.has(snapshotId)) return;
    this.#targets.set(snapshotId, { snapshotId, dir, shape, ready: [] });
    this.#timer ??= setInterval(() => void this.#relieve(), PRESSURE_CHECK_MS).unref();
    this.#refill();
  }

  /** A warmed VMM of this snapshot, if one is ready. */
  take(snapshotId: string): WarmVm | undefined {
    const target = this.#targets.get(snapshotId);
    const warm = target?.ready.shift();
    if (warm) setTimeout(() => this.#refill(), REFILL_DELAY_MS).unref();
    return warm;
  }

  get stats(): { ready: number } {
    let ready = 0;
    for (const target of this.#targets.values()) ready += target.ready.length;
    return { ready };
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#timer);
    await this.#filling?.catch(() => {});
    for (const target of this.#targets.values()) {
      for (const warm of target.ready.splice(0)) await this.discard(warm);
    }
  }

  #refill(): void {
    this.#filling ??= this.#fill().finally(() => {
      this.#filling = undefined;
    });
  }

  async #fill(): Promise<void> {
    for (const target of this.#targets.values()) {
      while (!this.#closed && target.ready.length < this.#o.size) {
        if ((await availableMiB()) < this.#o.minAvailableMiB) return;
        let warm: WarmVm;
        try {
          warm = await this.#make(target);
        } catch (err) {
          this.#o.logger.warn({ err, snapshotId: target.snapshotId }, "pool.fill_failed");
          await new Promise((resolve) => setTimeout(resolve, RETRY_AFTER_FAILURE_MS).unref());
          return;
        }
        if (this.#closed) return this.discard(warm);
        target.ready.push(warm);
      }
    }
  }

  async #make(target: Target): Promise<WarmVm> {
    const { driver, slots, agent, images, layout, capacity, logger } = this.#o;
    const started = performance.now();
    const releaseCapacity = capacity.reserve(target.shape);
    let slot: Slot | undefined;
    let prepared: PreparedRestore | undefined;
    try {
      slot = await slots.acquire();
      const id = newId();
      const spec = guestSpec({
        id,
        slot,
        images,
        shape: target.shape,
        runtimeDir: runtimeDir(layout, id),
      });
      prepared = await driver.prepareRestore(target.dir, spec, { background: true });
      const host = slot.hostAddress;
      // Warm the paths a create and its first calls take next.
      await prepared.warm(async () => {
        await agent.waitForHealth(host, { deadlineMs: 60_000 });
        await agent.exercise(host);
      });
      logger.info(
        { snapshotId: target.snapshotId, durationMs: Math.round(performance.now() - started) },
        "pool.vmm_warmed",
      );
      return { id, slot, prepared, releaseCapacity };
    } catch (err) {
      await prepared?.discard().catch(() => {});
      if (slot) await slots.release(slot).catch(() => {});
      releaseCapacity();
      throw err;
    }
  }

  /** Gives a warmed VMM up: its VMM, its slot and its capacity share. */
  async discard(warm: WarmVm): Promise<void> {
    await warm.prepared.discard().catch(() => {});
    await this.#o.slots.release(warm.slot).catch(() => {});
    warm.releaseCapacity();
  }

  /** Under memory pressure, gives pooled VMMs up one per check; otherwise tops the pools up. */
  async #relieve(): Promise<void> {
    if (this.#closed) return;
    if ((await availableMiB()) >= this.#o.minAvailableMiB) return this.#refill();
    for (const target of this.#targets.values()) {
      const warm = target.ready.pop();
      if (warm) {
        this.#o.logger.warn({ snapshotId: target.snapshotId }, "pool.vmm_released_memory_pressure");
        return this.discard(warm);
      }
    }
  }
}

/** MemAvailable from /proc/meminfo, MiB. */
async function availableMiB(): Promise<number> {
  const text = await readFile("/proc/meminfo", "utf8");
  const kib = Number(/^MemAvailable:\s+(\d+)/m.exec(text)?.[1] ?? 0);
  return kib / 1024;
}
