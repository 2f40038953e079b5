import { assertReady, type ServerStatus } from "../orchestrator/index.js";
import { WarrenError } from "../shared/index.js";

/**
 * A part of the node that exists once it has started (the orchestrator, the template
 * builds, the team catalog): the one way the node says "not ready yet". Until `bind()`,
 * `get()` throws the readiness gate's error (503 not_ready, or start_failed); the API, the
 * proxy and the metrics take `() => part` from it.
 */
export class Late<T> {
  #value: T | undefined;
  readonly #waiting: ((value: T) => void)[] = [];

  constructor(readonly status: () => ServerStatus) {}

  bind(value: T): void {
    this.#value = value;
    for (const listener of this.#waiting.splice(0)) listener(value);
  }

  /** The part, if bound. */
  get current(): T | undefined {
    return this.#value;
  }

  get(): T {
    if (this.#value !== undefined) return this.#value;
    assertReady(this.status());
    throw new WarrenError("internal", "the server is ready but a part of it was never bound");
  }

  /** Calls `listener` with the part once it is bound (at once if it is). */
  whenBound(listener: (value: T) => void): void {
    if (this.#value !== undefined) listener(this.#value);
    else this.#waiting.push(listener);
  }
}
