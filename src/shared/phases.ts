import { AsyncLocalStorage } from "node:async_hooks";

/**
 * Where one operation's time went: milliseconds by named phase, each **exclusive** of the
 * phases run inside it (so they add up to the time the outermost ones covered), summed when
 * a phase repeats. A name's part before its first dot is its category (`vmm.load` → `vmm`):
 * `api`, `orchestrator`, `jail`, `vmm`, `guest`.
 */
export class PhaseTimes {
  readonly #ms = new Map<string, number>();

  add(name: string, ms: number): void {
    this.#ms.set(name, (this.#ms.get(name) ?? 0) + ms);
  }

  /** Everything recorded, in ms. */
  total(): number {
    let sum = 0;
    for (const ms of this.#ms.values()) sum += ms;
    return sum;
  }

  /** Totals by category (the name's part before its first dot). */
  byCategory(): Record<string, number> {
    const totals = new PhaseTimes();
    for (const [name, ms] of this.#ms) totals.add(name.split(".")[0] ?? name, ms);
    return totals.toJSON();
  }

  /** By phase name, rounded to 0.1 ms (what log lines carry). */
  toJSON(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [name, ms] of this.#ms) out[name] = Math.round(ms * 10) / 10;
    return out;
  }
}

interface Frame {
  readonly times: PhaseTimes;
  /** Time spent in phases directly inside this one, taken out of its own. */
  childMs: number;
}

/**
 * The operation being timed, through the async context: a step deep in the stack (the
 * driver's jail, a guest call) records into whichever operation runs it, without every
 * interface between carrying a recorder.
 */
const current = new AsyncLocalStorage<Frame>();

/** Runs `fn` recording its phases into `times` (a request's, an operation's). */
export function recordPhases<T>(times: PhaseTimes, fn: () => T): T {
  return current.run({ times, childMs: 0 }, fn);
}

/** Records `ms` already spent (a wait measured by its caller) as phase `name`. */
export function addPhase(name: string, ms: number): void {
  const frame = current.getStore();
  if (!frame) return;
  frame.times.add(name, ms);
  frame.childMs += ms;
}

/**
 * Times `fn` as phase `name` of the operation running it (nothing to record outside one).
 * Phases run concurrently within one operation each count their own wall time, so a fork's
 * children's parts add up to more than the fork's wall time.
 */
export async function phase<T>(name: string, fn: () => Promise<T>): Promise<T> {
  const parent = current.getStore();
  if (!parent) return fn();
  const frame: Frame = { times: parent.times, childMs: 0 };
  const started = performance.now();
  try {
    return await current.run(frame, fn);
  } finally {
    const elapsed = performance.now() - started;
    // Children run concurrently (a fork's) may together outlast it: its own time is then 0.
    parent.times.add(name, Math.max(0, elapsed - frame.childMs));
    parent.childMs += elapsed;
  }
}
