/**
 * ServerLife: the life of one server process over fakes, so that a test's "crash" ends it as
 * a killed process ends. The fakes an orchestrator is given (driver, slots, agent, catalog)
 * are bound to its life; once it crashes, nothing it calls starts and nothing it awaits
 * returns (no cleanup runs, no timer of the dead server reaches the fakes), while what it had
 * already set going is done: a VMM it was spawning exists, an orphan for the next server.
 */

/** What a dead server waits on. */
const NEVER: Promise<never> = new Promise(() => {});

export class ServerLife {
  #dead = false;
  /** Calls in flight that the crash lets finish first (spawning a VMM, writing a row). */
  readonly #finishing = new Set<Promise<unknown>>();
  /** What each view stands for: handed back to the fakes (a slot released is the pool's own). */
  readonly #targets = new WeakMap<object, object>();

  get dead(): boolean {
    return this.#dead;
  }

  /**
   * The server's view of `target`: methods (and those of objects their promises resolve to,
   * e.g. a VM or a prepared restore) stop answering once the server is dead; promise-valued
   * properties (a VM's `exited`) never settle for it either. `finishOnCrash`: the crash waits
   * for this object's own calls in flight, so that their effects land before the next server
   * starts (not for nested objects: a VM start may wait at a test's gate).
   */
  bind<T extends object>(target: T, options: { finishOnCrash?: boolean } = {}): T {
    const life = this;
    const unwrap = (arg: unknown) =>
      (typeof arg === "object" && arg !== null && life.#targets.get(arg)) || arg;
    const view = new Proxy(target, {
      get(object, key) {
        const value: unknown = Reflect.get(object, key, object);
        if (value instanceof Promise) return life.#guard(value, false);
        if (typeof value !== "function") return value;
        return (...args: unknown[]) => {
          if (life.#dead) return NEVER;
          const result: unknown = value.apply(object, args.map(unwrap));
          return result instanceof Promise
            ? life.#guard(result, options.finishOnCrash === true)
            : result;
        };
      },
    });
    this.#targets.set(view, target);
    return view;
  }

  /** The server dies: its calls in flight that must finish do, then nothing of it runs on. */
  async crash(): Promise<void> {
    this.#dead = true;
    await Promise.allSettled([...this.#finishing]);
  }

  #guard<T>(work: Promise<T>, finish: boolean): Promise<T> {
    if (finish) {
      this.#finishing.add(work);
      const done = () => this.#finishing.delete(work);
      work.then(done, done);
    }
    return new Promise<T>((resolve, reject) => {
      work.then(
        (value) => {
          if (!this.#dead) resolve(bindable(value) ? this.bind(value) : value);
        },
        (err: unknown) => {
          if (!this.#dead) reject(err);
        },
      );
    });
  }
}

/** An object with behaviour (a VM, a prepared restore, a slot), not a plain row or list. */
function bindable<T>(value: T): value is T & object {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  if (Object.getPrototypeOf(value) !== Object.prototype) return true;
  return Object.values(value).some((field) => typeof field === "function");
}
