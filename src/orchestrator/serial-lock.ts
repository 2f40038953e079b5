/**
 * One operation at a time per key: run() queues behind whatever is running for that key.
 * Lifecycle operations on one sandbox are serialised with it, never interleaved.
 */
export class SerialLock {
  readonly #tails = new Map<string, Promise<unknown>>();

  run<T>(key: string, operation: () => Promise<T>): Promise<T> {
    const previous = this.#tails.get(key) ?? Promise.resolve();
    const result = previous.then(operation, operation);
    const tail = result.catch(() => {});
    this.#tails.set(key, tail);
    void tail.then(() => {
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    });
    return result;
  }

  /** True while an operation for `key` runs or waits. */
  busy(key: string): boolean {
    return this.#tails.has(key);
  }
}
