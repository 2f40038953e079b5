import { WarrenError } from "./errors.js";

/** The owner every quota has while there is one (one team per node until teams exist). */
export const DEFAULT_OWNER = "default";

/**
 * An amount (bytes, sandboxes…) each owner holds against a limit, e.g. the template build
 * uploads on disk. `reserve` checks and takes in one step (nothing awaits in between, so two
 * callers cannot both take the last room); over the limit it throws 429 `quota_exceeded`
 * naming the quota. Owners are keys (a team id); the default owner stands for everyone.
 */
export class Quota {
  readonly #used = new Map<string, number>();

  constructor(
    /** What is counted, as the error names it: "upload bytes". */
    readonly what: string,
    /** Each owner's limit. */
    readonly limitOf: (owner: string) => number,
    /** The setting that sets the limit, for the error message. */
    readonly setting?: string,
  ) {}

  used(owner = DEFAULT_OWNER): number {
    return this.#used.get(owner) ?? 0;
  }

  /** Throws quota_exceeded unless `amount` more fits within the owner's limit. */
  check(amount: number, owner = DEFAULT_OWNER): void {
    const used = this.used(owner);
    const limit = this.limitOf(owner);
    if (used + amount <= limit) return;
    throw new WarrenError(
      "quota_exceeded",
      `${this.what} quota exceeded: ${used} of ${limit} in use, ${amount} more asked${this.setting ? ` (${this.setting})` : ""}`,
    );
  }

  /** Checks and takes `amount`; the returned function gives it back (once). */
  reserve(amount: number, owner = DEFAULT_OWNER): () => void {
    this.check(amount, owner);
    this.add(amount, owner);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.release(amount, owner);
    };
  }

  /** Counts `amount` as held without a check (what is already on disk at start). */
  add(amount: number, owner = DEFAULT_OWNER): void {
    this.#used.set(owner, this.used(owner) + amount);
  }

  release(amount: number, owner = DEFAULT_OWNER): void {
    const left = Math.max(0, this.used(owner) - amount);
    if (left === 0) this.#used.delete(owner);
    else this.#used.set(owner, left);
  }

  /** Forgets every owner's use (before counting again what is on disk). */
  clear(): void {
    this.#used.clear();
  }
}
