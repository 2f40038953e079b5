/**
 * A gate tests hold work at: callers of `passed(id)` wait until `open()`. `reached(n)` tells
 * the test which n callers have arrived, so it can act while they are held (kill a sandbox
 * whose VM is starting, route a request to a sandbox being resumed).
 */
export class Gate {
  #open = false;
  readonly #arrived: string[] = [];
  readonly #waiting: (() => void)[] = [];
  readonly #watchers: { n: number; resolve: (ids: string[]) => void }[] = [];

  async passed(id: string): Promise<void> {
    this.#arrived.push(id);
    for (const watcher of this.#watchers.filter((w) => w.n <= this.#arrived.length)) {
      this.#watchers.splice(this.#watchers.indexOf(watcher), 1);
      watcher.resolve([...this.#arrived]);
    }
    if (this.#open) return;
    await new Promise<void>((resolve) => this.#waiting.push(resolve));
  }

  /** The ids of the first `n` arrivals, once they have arrived. */
  reached(n = 1): Promise<string[]> {
    if (this.#arrived.length >= n) return Promise.resolve(this.#arrived.slice(0, n));
    return new Promise((resolve) => this.#watchers.push({ n, resolve }));
  }

  open(): void {
    this.#open = true;
    for (const resolve of this.#waiting.splice(0)) resolve();
  }
}
