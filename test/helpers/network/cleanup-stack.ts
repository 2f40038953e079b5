/**
 * Teardown in reverse order of setup: tests `defer()` the undoing of each thing right after
 * creating it, and run() undoes everything, continuing past failures (the first is thrown
 * at the end).
 */
export class CleanupStack {
  readonly #steps: (() => unknown)[] = [];

  defer(step: () => unknown): void {
    this.#steps.push(step);
  }

  async run(): Promise<void> {
    const errors: unknown[] = [];
    for (let step = this.#steps.pop(); step; step = this.#steps.pop()) {
      try {
        await step();
      } catch (err) {
        errors.push(err);
      }
    }
    if (errors.length > 0) throw errors[0];
  }
}
