/**
 * At most `limit` holders at once; the rest wait in arrival order. Bounds how many VMs start
 * together: on few cores, 32 restores at once all finish later than 32 restores 4 at a time.
 */
export class Semaphore {
  #free: number;
  readonly #waiting: (() => void)[] = [];

  constructor(limit: number) {
    this.#free = Math.max(1, limit);
  }

  async use<T>(work: () => Promise<T>): Promise<T> {
    if (this.#free > 0) this.#free -= 1;
    else await new Promise<void>((resolve) => this.#waiting.push(resolve));
    try {
      return await work();
    } finally {
      const next = this.#waiting.shift();
      if (next) next();
      else this.#free += 1;
    }
  }
}
