import type { Logger } from "../../shared/index.js";
import type { LiveSandbox } from "./live-sandbox.js";
import type { SandboxTable } from "./sandbox-table.js";

/** setTimeout's largest delay; a later deadline is re-checked when this one fires. */
const MAX_TIMER_MS = 2_147_483_647;
/** A timer may fire this early (timer granularity) and still count as the deadline. */
const EARLY_FIRE_MS = 50;

export interface TtlTimersOptions {
  readonly table: SandboxTable;
  /** Called under the sandbox's lock once a running sandbox's deadline has passed. */
  readonly onExpired: (live: LiveSandbox) => Promise<void>;
  readonly logger: Logger;
}

/**
 * One timer per running sandbox, firing at its deadline (`row.endAt`). The deadline may
 * have moved while the timer waited (refresh, setTimeout, connect): it is read again under
 * the sandbox's lock before anything expires.
 */
export class TtlTimers {
  readonly #o: TtlTimersOptions;
  readonly #timers = new Map<string, NodeJS.Timeout>();
  #closed = false;

  constructor(options: TtlTimersOptions) {
    this.#o = options;
  }

  /** (Re)starts the sandbox's timer for its current deadline. */
  arm(live: LiveSandbox): void {
    this.clear(live.row.id);
    if (this.#closed) return;
    const delay = Math.max(0, Math.min(Date.parse(live.row.endAt) - Date.now(), MAX_TIMER_MS));
    const timer = setTimeout(() => void this.#fire(live), delay);
    timer.unref();
    this.#timers.set(live.row.id, timer);
  }

  clear(sandboxId: string): void {
    clearTimeout(this.#timers.get(sandboxId));
    this.#timers.delete(sandboxId);
  }

  /** No timer fires or is armed any more (shutdown). */
  close(): void {
    this.#closed = true;
    for (const timer of this.#timers.values()) clearTimeout(timer);
    this.#timers.clear();
  }

  async #fire(live: LiveSandbox): Promise<void> {
    const id = live.row.id;
    this.#timers.delete(id);
    const { table, onExpired, logger } = this.#o;
    await table
      .serial(id, async () => {
        if (this.#closed || !table.has(id) || live.row.state !== "running") return;
        if (Date.parse(live.row.endAt) > Date.now() + EARLY_FIRE_MS) return this.arm(live);
        await onExpired(live);
      })
      .catch((err: unknown) => logger.error({ sandboxId: id, err }, "sandbox.expiry_failed"));
  }
}
