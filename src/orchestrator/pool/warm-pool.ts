import type { Slot } from "../../network/index.js";
import { crashPoint } from "../../shared/crash-point.js";
import type { Logger } from "../../shared/index.js";
import type { MachineShape, PreparedRestore } from "../../vmm/index.js";
import { type Capacity, hostAvailableMiB } from "../capacity.js";
import { newId } from "../ids.js";
import { runtimeDir } from "../layout.js";
import type { LifecycleEvents } from "../lifecycle-events.js";
import type { NodeDrivers } from "../node-drivers.js";
import { guestSpec } from "../vm-spec.js";
import { allocate, TemplateDemand } from "./pool-sizing.js";

/** A VMM restored from a template, run once until envd answered, then stopped: ready to `start()`. */
export interface WarmVm {
  /** The id the sandbox that takes it will have (its runtime dir is named after it). */
  readonly id: string;
  readonly slot: Slot;
  readonly prepared: PreparedRestore;
  /** Its share of the node's capacity, handed over to the sandbox that takes it. */
  readonly releaseCapacity: () => void;
}

/** What a pool needs to warm VMMs of a template: what a create already holds, no catalog read. */
export interface PoolTemplate {
  readonly snapshotId: string;
  /** The snapshot's directory (its `SnapshotRow.dir`). */
  readonly dir: string;
  readonly shape: MachineShape;
  /** The access token envd in the snapshot has (captured from a secured sandbox), if any. */
  readonly token?: string;
  /** More of the guest to walk before the VMM is parked (a template's own servers). */
  readonly warmUp?: (host: string, signal: AbortSignal) => Promise<void>;
}

/** How the pools are sized (settings of the server, clock and probe of tests). */
export interface PoolSettings {
  /** Warmed VMMs the base template keeps whatever the demand (0: none). */
  readonly baseFloor: number;
  /** Most warmed VMMs recent demand may ask for one template (0: floors only, `keepWarm`). */
  readonly maxPerTemplate: number;
  /** Guest memory all pooled VMMs may hold together, MiB. */
  readonly maxMemoryMiB: number;
  /** A template not created from for this long has its VMMs given up (down to its floor). */
  readonly idleMs: number;
  /** Below this much available host memory, pooled VMMs are given up and none are made. */
  readonly minAvailableMiB: number;
  /** The clock demand is measured with (tests pass their own). Default `Date.now`. */
  readonly now?: () => number;
  /** MemAvailable of the host, MiB (tests pass their own). Default: /proc/meminfo. */
  readonly availableMiB?: () => Promise<number>;
  /** How long a refill waits after a take. Default 1 s (see REFILL_DELAY_MS). */
  readonly refillDelayMs?: number;
}

export interface WarmPoolOptions
  extends Omit<PoolSettings, "baseFloor">,
    Omit<NodeDrivers, "catalog"> {
  readonly capacity: Capacity;
  readonly logger: Logger;
  readonly events: LifecycleEvents;
  /**
   * The node's egress CA (PEM), installed in each VMM while it is warmed (a /init carrying
   * it alone), so that a create's /init finds it trusted already.
   */
  readonly guestCaCertificate?: string;
  /** Whether creates wait for a VM start now: no VMM is warmed meanwhile (the next check tries). */
  readonly busy?: () => boolean;
}

interface Target extends PoolTemplate {
  /** VMMs kept whatever the demand. */
  floor: number;
  readonly demand: TemplateDemand;
  lastDemandAt: number;
  readonly ready: WarmVm[];
  /** Warmings failed in a row, and when the next may start (`now()` clock). */
  failures: number;
  retryAt: number;
}

/** The VMM being warmed: its target, and its capacity share once reserved. */
interface Making {
  readonly target: Target;
  releaseCapacity?: () => void;
  /** Its capacity share was given to a reserve that needed it: the VMM is given up when made. */
  reclaimed: boolean;
}

const CHECK_INTERVAL_MS = 5_000;
/**
 * After a failed warming its template waits this long, doubled per failure in a row up to
 * MAX_RETRY_AFTER_FAILURE_MS, while the other templates' pools go on filling: a template
 * whose guest never answers (its envd replaced by its user) must not take the filler's time.
 */
const RETRY_AFTER_FAILURE_MS = 5_000;
const MAX_RETRY_AFTER_FAILURE_MS = 300_000;
/** How long a warmed VMM's envd has to answer its first /health. */
const WARM_HEALTH_DEADLINE_MS = 60_000;
/**
 * A refill waits this long after a take: a QEMU starting (before it is reniced) and the
 * server preparing its files compete for the CPU with the create's /init and first command
 * (on 2 cores under TCG: /init ~100 ms instead of ~50).
 */
const REFILL_DELAY_MS = 1_000;
/** What warming one VMM is taken to cost before one was timed (TCG: 1–3 s). */
const FIRST_WARM_ESTIMATE_MS = 2_000;
/** Weight of the latest warming time in the running estimate. */
const WARM_TIME_WEIGHT = 0.3;

/**
 * Per-template pools of warmed VMMs in their own network slots. A create takes one when
 * there is one (then only a `cont` and /init remain) and falls back to a plain restore
 * otherwise. Every create counts as demand for its template: a pool is sized to the most
 * creates that came within one refill time (the refill delay plus the time to warm a VMM)
 * over the last `idleMs`, capped by `maxPerTemplate`; a template with no create for
 * `idleMs` loses its pool, down to its floor (`keepWarm`: the base template's configured
 * size). All pooled VMMs' guest memory stays within `maxMemoryMiB`, the least recently
 * demanded templates shrinking first. Pooled VMMs count against capacity and are given up
 * when host memory runs low.
 */
export class WarmPool {
  readonly #o: WarmPoolOptions;
  readonly #now: () => number;
  readonly #availableMiB: () => Promise<number>;
  readonly #targets = new Map<string, Target>();
  /** Snapshots whose templates were deleted: a create racing the deletion must not revive them. */
  readonly #forgotten = new Set<string>();
  readonly #discarding = new Set<Promise<void>>();
  /** The VMM being warmed, and for which target (its memory counts against the budget already). */
  #making: Making | undefined;
  #filling: Promise<void> | undefined;
  /** The refill due after a take (REFILL_DELAY_MS), if one is. */
  #delayed: NodeJS.Timeout | undefined;
  #timer: NodeJS.Timeout | undefined;
  #warmMs = FIRST_WARM_ESTIMATE_MS;
  #closed = false;
  /** Aborted by close(): a warming in flight stops waiting on its guest at once. */
  readonly #closing = new AbortController();

  constructor(options: WarmPoolOptions) {
    this.#o = options;
    this.#now = options.now ?? Date.now;
    this.#availableMiB = options.availableMiB ?? (async () => hostAvailableMiB());
    options.capacity.reclaimWith(() => this.#reclaimOne());
  }

  /** Keeps at least `floor` warmed VMMs of this template from now on, demand or not. */
  keepWarm(template: PoolTemplate, floor: number): void {
    if (floor <= 0 || this.#closed) return;
    const target = this.#target(template, true);
    target.floor = Math.max(target.floor, floor);
    this.#rebalance();
  }

  /**
   * A create from this template: counts as demand for it (a hit or a miss alike) and hands
   * out a warmed VMM if one is ready. The pool refills, or grows, soon after.
   */
  take(template: PoolTemplate): WarmVm | undefined {
    if (this.#closed || this.#forgotten.has(template.snapshotId)) return undefined;
    const target = this.#target(template, this.#o.maxPerTemplate > 0);
    if (!target) return undefined;
    target.demand.record(this.#now());
    target.lastDemandAt = this.#now();
    const warm = target.ready.shift();
    this.#refillSoon();
    return warm;
  }

  /**
   * The template is gone (deleted, or replaced by a rebuild): its warmed VMMs are given up
   * before its snapshot is released, and later creates racing the deletion make no more.
   */
  async forget(snapshotId: string): Promise<void> {
    this.#forgotten.add(snapshotId);
    const target = this.#targets.get(snapshotId);
    if (!target) return;
    this.#targets.delete(snapshotId);
    await Promise.all(target.ready.splice(0).map((warm) => this.discard(warm)));
    this.#o.events.emit("pool.forgotten", { snapshotId });
  }

  get stats(): { ready: number; memoryMiB: number; templates: number } {
    let ready = 0;
    let memoryMiB = 0;
    for (const target of this.#targets.values()) {
      ready += target.ready.length;
      memoryMiB += target.ready.length * target.shape.memoryMiB;
    }
    return { ready, memoryMiB, templates: this.#targets.size };
  }

  /** Warmed VMMs ready per template snapshot (templates with a pool only). */
  readyBySnapshot(): Map<string, number> {
    return new Map([...this.#targets].map(([id, target]) => [id, target.ready.length]));
  }

  /**
   * The periodic check (every 5 s; tests call it with their clock moved): under memory
   * pressure gives one pooled VMM up, otherwise resizes every pool to its demand.
   */
  async tick(): Promise<void> {
    if (this.#closed) return;
    if ((await this.#availableMiB()) < this.#o.minAvailableMiB) {
      const lru = this.#leastRecentlyDemanded();
      const warm = lru?.ready.pop();
      if (lru && warm) {
        this.#o.events.emit("pool.vmm_released_memory_pressure", { snapshotId: lru.snapshotId });
        await this.discard(warm);
      }
      return;
    }
    this.#rebalance();
    await Promise.all(this.#discarding);
  }

  /** Runs a refill that is due now, and resolves once no refill runs and every VMM given up is gone. */
  async settled(): Promise<void> {
    if (this.#delayed) this.#refillNow();
    while (this.#filling || this.#discarding.size > 0) {
      await this.#filling?.catch(() => {});
      await Promise.all(this.#discarding);
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#closing.abort(new Error("the warm pool is closing"));
    clearInterval(this.#timer);
    clearTimeout(this.#delayed);
    await this.#filling?.catch(() => {});
    for (const target of this.#targets.values()) {
      for (const warm of target.ready.splice(0)) await this.discard(warm);
    }
    await Promise.all(this.#discarding);
  }

  /** Gives a warmed VMM up: its VMM, its slot and its capacity share. */
  async discard(warm: WarmVm): Promise<void> {
    await warm.prepared.discard().catch(() => {});
    await this.#o.slots.release(warm.slot).catch(() => {});
    warm.releaseCapacity();
  }

  #target(template: PoolTemplate, create: true): Target;
  #target(template: PoolTemplate, create: boolean): Target | undefined;
  #target(template: PoolTemplate, create: boolean): Target | undefined {
    let target = this.#targets.get(template.snapshotId);
    if (target || !create) return target;
    target = {
      ...template,
      floor: 0,
      demand: new TemplateDemand(),
      lastDemandAt: this.#now(),
      ready: [],
      failures: 0,
      retryAt: 0,
    };
    this.#targets.set(template.snapshotId, target);
    this.#timer ??= setInterval(() => void this.tick(), CHECK_INTERVAL_MS).unref();
    return target;
  }

  /** How many VMMs each template may hold now, in the order a fill serves them. */
  #plan(): Map<Target, { allowed: number; wanted: number }> {
    const { maxPerTemplate, idleMs, maxMemoryMiB } = this.#o;
    const now = this.#now();
    // What a pool must cover: the creates that come before a VMM taken is replaced.
    const horizonMs = (this.#o.refillDelayMs ?? REFILL_DELAY_MS) + this.#warmMs;
    const wants = [...this.#targets.values()].map((target) => {
      target.demand.prune(now - idleMs);
      const fromDemand = Math.min(maxPerTemplate, target.demand.peak(horizonMs));
      return {
        key: target,
        shape: target.shape,
        floor: target.floor,
        wanted: Math.max(target.floor, fromDemand),
        lastDemandAt: target.lastDemandAt,
      };
    });
    const wanted = new Map(wants.map((want) => [want.key, want.wanted]));
    const allowed = allocate(wants, maxMemoryMiB);
    return new Map(
      [...allowed].map(([key, n]) => [key, { allowed: n, wanted: wanted.get(key) ?? 0 }]),
    );
  }

  /** Gives up what no pool may hold any more, drops idle templates, then refills. */
  #rebalance(): void {
    if (this.#closed) return;
    for (const [target, { allowed, wanted }] of this.#plan()) {
      const keep = Math.max(0, allowed - (this.#making?.target === target ? 1 : 0));
      while (target.ready.length > keep) {
        const warm = target.ready.pop() as WarmVm;
        const reason = allowed < wanted ? "memory_budget" : target.demand.empty ? "idle" : "demand";
        this.#o.events.emit("pool.vmm_released", { snapshotId: target.snapshotId, reason });
        this.#discardLater(warm);
      }
      const unused = target.demand.empty && target.floor === 0 && target.ready.length === 0;
      if (unused && this.#making?.target !== target) this.#targets.delete(target.snapshotId);
    }
    this.#refill();
  }

  /**
   * A reserve that would fail takes a pooled VMM's room: the least recently demanded
   * template's first, then the VMM being warmed. Its capacity share is given back at once
   * (the caller reserves synchronously); the VMM itself goes in the background, a moment
   * later (one being warmed once its warming ends).
   */
  #reclaimOne(): boolean {
    const lru = this.#leastRecentlyDemanded();
    const warm = lru?.ready.pop();
    if (lru && warm) {
      this.#o.events.emit("pool.vmm_released", { snapshotId: lru.snapshotId, reason: "capacity" });
      warm.releaseCapacity();
      this.#discardLater(warm);
      return true;
    }
    const making = this.#making;
    if (!making?.releaseCapacity || making.reclaimed) return false;
    this.#o.events.emit("pool.vmm_released", {
      snapshotId: making.target.snapshotId,
      reason: "capacity",
      warming: true,
    });
    making.reclaimed = true;
    making.releaseCapacity();
    return true;
  }

  /** The template with warmed VMMs whose last create is the oldest: the first to give one up. */
  #leastRecentlyDemanded(): Target | undefined {
    return [...this.#targets.values()]
      .filter((target) => target.ready.length > 0)
      .sort((a, b) => a.lastDemandAt - b.lastDemandAt)[0];
  }

  #discardLater(warm: WarmVm): void {
    const done = this.discard(warm).finally(() => this.#discarding.delete(done));
    this.#discarding.add(done);
  }

  /** A refill after a take waits a little (REFILL_DELAY_MS) so as not to slow that create. */
  #refillSoon(): void {
    const delayMs = this.#o.refillDelayMs ?? REFILL_DELAY_MS;
    this.#delayed ??= setTimeout(() => this.#refillNow(), delayMs).unref();
  }

  #refillNow(): void {
    clearTimeout(this.#delayed);
    this.#delayed = undefined;
    this.#rebalance();
  }

  #refill(): void {
    if (this.#closed) return;
    this.#filling ??= this.#fill().finally(() => {
      this.#filling = undefined;
    });
  }

  async #fill(): Promise<void> {
    while (!this.#closed) {
      const now = this.#now();
      const next = [...this.#plan()].find(
        ([target, { allowed }]) => target.ready.length < allowed && target.retryAt <= now,
      );
      if (!next) return;
      const [target] = next;
      if ((await this.#availableMiB()) < this.#o.minAvailableMiB) return;
      // A full node keeps its room for creates; the next check tries again.
      if (!this.#o.capacity.fits(target.shape) || this.#o.busy?.()) return;
      let warm: WarmVm;
      const making: Making = { target, reclaimed: false };
      this.#making = making;
      try {
        warm = await this.#make(making);
      } catch (err) {
        if (this.#closed) return;
        target.failures += 1;
        const retryInMs = Math.min(
          RETRY_AFTER_FAILURE_MS * 2 ** (target.failures - 1),
          MAX_RETRY_AFTER_FAILURE_MS,
        );
        target.retryAt = this.#now() + retryInMs;
        this.#o.logger.warn(
          { err, snapshotId: target.snapshotId, failures: target.failures, retryInMs },
          "pool.fill_failed",
        );
        continue;
      } finally {
        this.#making = undefined;
      }
      target.failures = 0;
      // Its room went to a create meanwhile: the node is full, the next check tries again.
      if (making.reclaimed) {
        await this.discard(warm);
        return;
      }
      // Forgotten, closed or shrunk meanwhile: the VMM is not wanted any more.
      const allowed = this.#plan().get(target)?.allowed ?? 0;
      const gone = this.#targets.get(target.snapshotId) !== target;
      if (this.#closed || gone || allowed <= target.ready.length) {
        await this.discard(warm);
        continue;
      }
      target.ready.push(warm);
      this.#dropWhenDead(target, warm);
    }
  }

  /** A warmed VMM that dies while it waits (its keeper died, say) is dropped, not handed out. */
  #dropWhenDead(target: Target, warm: WarmVm): void {
    void warm.prepared.exited.then(() => {
      const index = target.ready.indexOf(warm);
      if (index < 0) return; // taken or given up meanwhile: not the pool's any more
      target.ready.splice(index, 1);
      this.#o.events.emit("pool.vmm_released", { snapshotId: target.snapshotId, reason: "died" });
      warm.releaseCapacity();
      this.#discardLater(warm);
      this.#refillSoon();
    });
  }

  async #make(making: Making): Promise<WarmVm> {
    const { driver, slots, agent, images, layout, capacity, events } = this.#o;
    const { target } = making;
    const started = this.#now();
    const releaseCapacity = capacity.reserve(target.shape);
    making.releaseCapacity = releaseCapacity;
    let slot: Slot | undefined;
    let prepared: PreparedRestore | undefined;
    try {
      capacity.starting();
      slot = await slots.acquire();
      crashPoint("warm-pool.make.after-slot");
      const id = newId();
      const spec = guestSpec({
        id,
        slot,
        images,
        shape: target.shape,
        runtimeDir: runtimeDir(layout, id),
      });
      prepared = await driver.prepareRestore(target.dir, spec, { background: true });
      crashPoint("warm-pool.make.after-prepare");
      const host = slot.hostAddress;
      // Warm the paths a create and its first calls take next. Both calls are bounded
      // (the template's envd may be anything its user left there) and end with close().
      const signal = this.#closing.signal;
      await prepared.warm(async () => {
        await agent.waitForHealth(host, { deadlineMs: WARM_HEALTH_DEADLINE_MS, signal });
        await agent.exercise(host, target.token, signal);
        const caCertificates = this.#o.guestCaCertificate;
        if (caCertificates) {
          await agent.init(
            host,
            { caCertificates },
            {
              token: target.token,
              deadlineMs: WARM_HEALTH_DEADLINE_MS,
              signal,
              stamped: false,
            },
          );
        }
        await target.warmUp?.(host, signal);
      });
      crashPoint("warm-pool.make.after-warm");
      const durationMs = Math.round(this.#now() - started);
      this.#warmMs += WARM_TIME_WEIGHT * (durationMs - this.#warmMs);
      events.emit("pool.vmm_warmed", { snapshotId: target.snapshotId, durationMs });
      return { id, slot, prepared, releaseCapacity };
    } catch (err) {
      await prepared?.discard().catch(() => {});
      if (slot) await slots.release(slot).catch(() => {});
      releaseCapacity();
      throw err;
    }
  }
}
