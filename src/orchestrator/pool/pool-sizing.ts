import type { MachineShape } from "../../vmm/index.js";

/**
 * Creates remembered per template: enough for any pool size asked of it, few enough that a
 * flood of creates costs little memory and `peak` little time.
 */
const MAX_REMEMBERED = 1_024;

/** The recent creates of one template: when they came, and what they ask of its pool. */
export class TemplateDemand {
  /** Times of the creates still in the window, oldest first. */
  readonly #at: number[] = [];

  record(now: number): void {
    this.#at.push(now);
    if (this.#at.length > MAX_REMEMBERED) this.#at.shift();
  }

  /** Forgets creates before `since`. */
  prune(since: number): void {
    let stale = 0;
    while (stale < this.#at.length && (this.#at[stale] as number) < since) stale += 1;
    this.#at.splice(0, stale);
  }

  get empty(): boolean {
    return this.#at.length === 0;
  }

  /**
   * The most creates that came within any `horizonMs` of the window: what the pool must hold
   * to answer them all from warmed VMMs when they come again before it could refill.
   */
  peak(horizonMs: number): number {
    let best = 0;
    let first = 0;
    for (let last = 0; last < this.#at.length; last += 1) {
      while ((this.#at[last] as number) - (this.#at[first] as number) >= horizonMs) first += 1;
      best = Math.max(best, last - first + 1);
    }
    return best;
  }
}

/** What one template's pool asks for. */
export interface PoolWant<K> {
  readonly key: K;
  readonly shape: MachineShape;
  /** Kept whatever the demand (the base template's configured size). */
  readonly floor: number;
  /** Floor or demand, whichever is more (demand capped per template). */
  readonly wanted: number;
  /** When it was last created from (or given its floor): who keeps VMMs when memory is short. */
  readonly lastDemandAt: number;
}

/**
 * How many warmed VMMs each template may hold, their guest memory together within
 * `budgetMiB`: floors first, then the rest of each want, most recently demanded template
 * first, so that the least recently demanded ones shrink when the budget is short. The
 * result lists templates in that order of priority (the order a fill follows).
 */
export function allocate<K>(wants: readonly PoolWant<K>[], budgetMiB: number): Map<K, number> {
  const byRecency = [...wants].sort((a, b) => b.lastDemandAt - a.lastDemandAt);
  const allowed = new Map<K, number>();
  let left = budgetMiB;
  const grant = (want: PoolWant<K>, upTo: number) => {
    const has = allowed.get(want.key) ?? 0;
    const fits = Math.floor(left / Math.max(1, want.shape.memoryMiB));
    const more = Math.max(0, Math.min(upTo - has, fits));
    allowed.set(want.key, has + more);
    left -= more * want.shape.memoryMiB;
  };
  for (const want of byRecency) if (want.floor > 0) grant(want, want.floor);
  for (const want of byRecency) grant(want, want.wanted);
  return allowed;
}
