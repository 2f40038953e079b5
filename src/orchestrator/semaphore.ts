/** A holder's permit: `release()` gives it back before the holder's work ends (idempotent). */
export interface Permit {
  release(): void;
}

/**
 * At most `limit` holders at once; the rest wait in arrival order. Bounds how many VMs start
 * together: on few cores, 32 restores at once all finish later than 32 restores 4 at a time.
 * A holder may give its permit back early (`permit.release()`), e.g. once it only waits on
 * a guest that may never answer: the permit bounds CPU contention, and a guest that does
 * not answer holds no CPU, so it must not hold up the starts queued behind it.
 */
export class Semaphore {
  #free: number;
  readonly #waiting: (() => void)[] = [];

  constructor(limit: number) {
    this.#free = Math.max(1, limit);
  }

  async use<T>(work: (permit: Permit) => Promise<T>): Promise<T> {
    if (this.#free > 0) this.#free -= 1;
    else await new Promise<void>((resolve) => this.#waiting.push(resolve));
    let held = true;
    const permit: Permit = {
      release: () => {
        if (!held) return;
        held = false;
        const next = this.#waiting.shift();
        if (next) next();
        else this.#free += 1;
      },
    };
    try {
      return await work(permit);
    } finally {
      permit.release();
    }
  }
}
