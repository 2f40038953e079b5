import { WarrenError } from "../shared/index.js";

export interface StartQueueSettings {
  /** Starts that may wait for a permit at once; one more is refused at once (429). */
  readonly maxQueued: number;
  /**
   * Longest a start may wait for its permit: one whose estimated wait is longer is refused at
   * once, and one that has waited this long (the estimate was wrong) is refused then (429).
   */
  readonly maxWaitMs: number;
}

/**
 * A start's permit: `release()` gives it back (idempotent), possibly before the start ends —
 * e.g. once it only waits on a guest that may never answer: the permit bounds CPU contention,
 * and a guest that does not answer holds no CPU, so it must not hold up the starts behind it.
 */
export interface Permit {
  release(): void;
}

export const DEFAULT_START_QUEUE: StartQueueSettings = { maxQueued: 256, maxWaitMs: 20_000 };

/** A place in the queue, taken on arrival: its turn comes in arrival order. */
export interface StartTicket {
  /** Resolves with the permit once it is this ticket's turn; rejects past the wait bound. */
  turn(): Promise<Permit>;
  /** Gives the place (or the permit, once granted) back: the start will not happen. */
  cancel(): void;
}

interface Waiter {
  readonly grant: (permit: Permit) => void;
  readonly refuse: (err: WarrenError) => void;
  readonly timer: NodeJS.Timeout;
  /** When it took its place (performance.now()). */
  readonly since: number;
  /** Not shed on the estimate (see enter). */
  readonly patient: boolean;
}

/** Weight of the newest permit's hold time in the running estimate. */
const HOLD_WEIGHT = 0.2;
/** How often the waiters are checked against a newer estimate while any wait. */
const RECHECK_MS = 500;

/**
 * At most `concurrency` VM starts at once (on few cores, 32 restores at once all finish later
 * than 32 restores 4 at a time); the rest wait in arrival order, up to a bound in number and
 * in time, so that a burst far larger than the node gets prompt 429s with a Retry-After
 * that says when room is likely, never requests that hang until the client gives up.
 *
 * A start takes its place (`enter`) when it is admitted, before any await: arrival order is
 * the order creates reached the node. The wait is estimated from how long permits have been
 * held lately (no less than the starts under way have held theirs so far); before any start
 * has run, only the number bound applies. As the estimate grows (a burst's first starts take
 * longer than anything seen before), waiters it no longer gets through within their bound are
 * refused then, not when the bound runs out: a burst's first arrivals learn within seconds.
 */
export class StartQueue {
  #free: number;
  readonly #waiting: Waiter[] = [];
  /** Running estimate of how long a start holds its permit, ms; undefined until one ends. */
  #heldMs: number | undefined;
  /** When each permit held now was granted (performance.now()). */
  readonly #grantedAt = new Set<{ readonly at: number }>();
  /** Rechecks the waiters while any wait (unref'd: never keeps the process up). */
  #recheck: NodeJS.Timeout | undefined;

  constructor(
    readonly concurrency: number,
    readonly settings: StartQueueSettings = DEFAULT_START_QUEUE,
  ) {
    this.concurrency = Math.max(1, concurrency);
    this.#free = this.concurrency;
  }

  /** Starts waiting for a permit now. */
  get queued(): number {
    return this.#waiting.length;
  }

  /** Starts holding a permit now. */
  get starting(): number {
    return this.concurrency - this.#free;
  }

  /** The estimated wait of a start arriving now, ms (0 with a permit free or no estimate yet). */
  get estimatedWaitMs(): number {
    return this.#waitAt(this.#waiting.length + 1);
  }

  /**
   * Takes a place, or throws 429 start_queue_full when the queue is full or too slow. A
   * `patient` waiter (a fork's child) is never shed on the estimate, only at its bound.
   */
  enter(options: { readonly patient?: boolean } = {}): StartTicket {
    if (this.#free > 0 && this.#waiting.length === 0) {
      this.#free -= 1;
      return this.#granted(this.#permit());
    }
    this.#admit();
    let grant: (permit: Permit) => void = () => {};
    let refuse: (err: WarrenError) => void = () => {};
    const turn = new Promise<Permit>((resolve, reject) => {
      grant = resolve;
      refuse = reject;
    });
    turn.catch(() => {}); // refused before anyone asked for its turn: not unhandled
    let permit: Permit | undefined;
    let refused = false;
    const waiter: Waiter = {
      grant: (granted) => {
        clearTimeout(waiter.timer);
        permit = granted;
        grant(granted);
      },
      refuse: (err) => {
        clearTimeout(waiter.timer);
        refused = true;
        refuse(err);
      },
      timer: setTimeout(() => {
        this.#remove(waiter);
        waiter.refuse(this.#timedOut());
      }, this.settings.maxWaitMs),
      since: performance.now(),
      patient: options.patient === true,
    };
    this.#waiting.push(waiter);
    this.#recheck ??= setInterval(() => this.#shed(), RECHECK_MS).unref();
    return {
      turn: () => turn,
      cancel: () => {
        if (permit) permit.release();
        else if (!refused && this.#remove(waiter)) waiter.refuse(cancelled());
      },
    };
  }

  #granted(permit: Permit): StartTicket {
    return { turn: async () => permit, cancel: () => permit.release() };
  }

  /** Throws when one more waiter would pass either bound. */
  #admit(): void {
    const { maxQueued, maxWaitMs } = this.settings;
    const position = this.#waiting.length + 1;
    if (position > maxQueued) {
      throw refusal(
        `${maxQueued} starts are already waiting (WARREN_START_QUEUE_DEPTH)`,
        this.#retryAfterS(),
      );
    }
    const waitMs = this.#waitAt(position);
    if (waitMs > maxWaitMs) {
      throw refusal(
        `${this.#waiting.length} starts are waiting, about ${seconds(waitMs)} s for one more, over the ${seconds(maxWaitMs)} s bound (WARREN_START_QUEUE_WAIT_MS)`,
        this.#retryAfterS(),
      );
    }
  }

  /**
   * Refuses the waiters that the current estimate no longer gets through before their bound,
   * in arrival order: each one refused moves those behind it up.
   */
  #shed(): void {
    const now = performance.now();
    let position = 0;
    for (const waiter of [...this.#waiting]) {
      const left = this.settings.maxWaitMs - (now - waiter.since);
      const waitMs = this.#waitAt(position + 1);
      if (waitMs <= left || waiter.patient) {
        position += 1;
        continue;
      }
      this.#remove(waiter);
      waiter.refuse(
        new WarrenError(
          "start_queue_timeout",
          `the node is busier than estimated when this start was queued: about ${seconds(waitMs)} s more to wait, past the ${seconds(this.settings.maxWaitMs)} s bound (WARREN_START_QUEUE_WAIT_MS); retry later`,
          { retryAfterS: this.#retryAfterS() },
        ),
      );
    }
    this.#stopRecheckWhenIdle();
  }

  #stopRecheckWhenIdle(): void {
    if (this.#waiting.length > 0 || !this.#recheck) return;
    clearInterval(this.#recheck);
    this.#recheck = undefined;
  }

  #timedOut(): WarrenError {
    return new WarrenError(
      "start_queue_timeout",
      `waited ${seconds(this.settings.maxWaitMs)} s (WARREN_START_QUEUE_WAIT_MS) for a VM start: the node is busier than estimated; retry later`,
      { retryAfterS: this.#retryAfterS() },
    );
  }

  /** How long the permits held now have been held so far, on average, ms (0: none held). */
  #heldSoFarMs(): number {
    if (this.#grantedAt.size === 0) return 0;
    const now = performance.now();
    let sum = 0;
    for (const held of this.#grantedAt) sum += now - held.at;
    return sum / this.#grantedAt.size;
  }

  /**
   * How long a start holds its permit, ms: the running average of those that ended, but no
   * less than the starts under way have held theirs so far — at a burst's start none has
   * ended yet, and when the node slows down the average lags.
   */
  #holdMs(): number | undefined {
    const soFar = this.#heldSoFarMs();
    if (this.#heldMs === undefined && soFar === 0) return undefined;
    return Math.max(this.#heldMs ?? 0, soFar);
  }

  /**
   * Estimated wait of the waiter at `position` (1 = next), ms: what the starts under way have
   * left of their hold, then a whole hold per `concurrency` waiters ahead.
   */
  #waitAt(position: number): number {
    const hold = this.#holdMs();
    if (hold === undefined || (this.#free > 0 && this.#waiting.length === 0)) return 0;
    const wavesAhead = Math.ceil(position / this.concurrency) - 1;
    return hold - this.#heldSoFarMs() + wavesAhead * hold;
  }

  /**
   * When a refused start should come back: once the queue has drained to half of what it
   * admits, so that a burst's refused clients, all told the same, find room when they return.
   */
  #retryAfterS(): number {
    const hold = this.#holdMs();
    if (!hold) return 1;
    const admits = Math.min(
      this.settings.maxQueued,
      Math.floor(this.settings.maxWaitMs / hold) * this.concurrency,
    );
    const drainMs = ((this.#waiting.length - admits / 2) * hold) / this.concurrency;
    return Math.max(1, Math.ceil(drainMs / 1000));
  }

  #permit(): Permit {
    const granted = { at: performance.now() };
    this.#grantedAt.add(granted);
    let held = true;
    return {
      release: () => {
        if (!held) return;
        held = false;
        this.#grantedAt.delete(granted);
        const heldMs = performance.now() - granted.at;
        this.#heldMs =
          this.#heldMs === undefined
            ? heldMs
            : this.#heldMs + HOLD_WEIGHT * (heldMs - this.#heldMs);
        const next = this.#waiting.shift();
        if (next) next.grant(this.#permit());
        else this.#free += 1;
        this.#shed();
      },
    };
  }

  #remove(waiter: Waiter): boolean {
    const index = this.#waiting.indexOf(waiter);
    if (index < 0) return false;
    this.#waiting.splice(index, 1);
    this.#stopRecheckWhenIdle();
    return true;
  }
}

function refusal(why: string, retryAfterS: number): WarrenError {
  return new WarrenError("start_queue_full", `node busy starting VMs: ${why}; retry later`, {
    retryAfterS,
  });
}

function cancelled(): WarrenError {
  return new WarrenError("sandbox_killed", "the start was given up while it waited its turn");
}

function seconds(ms: number): string {
  return (ms / 1000).toFixed(ms < 10_000 ? 1 : 0);
}
