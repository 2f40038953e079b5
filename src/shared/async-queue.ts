/**
 * An unbounded push queue consumed as an async iterator: producers `push()` and `close()`,
 * one consumer iterates. Iteration ends after `close()` once the queue is drained, or
 * immediately when the consumer's signal aborts.
 */
export class AsyncQueue<T> implements AsyncIterable<T> {
  #items: T[] = [];
  #closed = false;
  #wake: (() => void) | undefined;

  push(item: T): void {
    if (this.#closed) return;
    this.#items.push(item);
    this.#wake?.();
  }

  close(): void {
    this.#closed = true;
    this.#wake?.();
  }

  get closed(): boolean {
    return this.#closed;
  }

  async *iterate(signal?: AbortSignal): AsyncGenerator<T> {
    const onAbort = () => this.#wake?.();
    signal?.addEventListener("abort", onAbort);
    try {
      for (;;) {
        if (signal?.aborted) return;
        const item = this.#items.shift();
        if (item !== undefined) {
          yield item;
          continue;
        }
        if (this.#closed) return;
        await new Promise<void>((resolve) => {
          this.#wake = resolve;
        });
        this.#wake = undefined;
      }
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return this.iterate();
  }
}
