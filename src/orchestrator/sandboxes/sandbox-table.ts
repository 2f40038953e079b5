import { WarrenError } from "../../shared/index.js";
import { addPhase } from "../../shared/phases.js";
import { SerialLock } from "../serial-lock.js";
import type { LiveSandbox } from "./live-sandbox.js";

/**
 * The sandboxes this node tracks (running, paused and in between) and the lock under which
 * every operation on one of them runs: one at a time per sandbox, never interleaved.
 */
export class SandboxTable {
  readonly #sandboxes = new Map<string, LiveSandbox>();
  readonly #lock = new SerialLock();

  /** The sandbox; sandbox_not_found for unknown or killed ids. */
  get(sandboxId: string): LiveSandbox {
    const live = this.#sandboxes.get(sandboxId);
    if (!live) throw new WarrenError("sandbox_not_found", `sandbox ${sandboxId} not found`);
    return live;
  }

  find(sandboxId: string): LiveSandbox | undefined {
    return this.#sandboxes.get(sandboxId);
  }

  has(sandboxId: string): boolean {
    return this.#sandboxes.has(sandboxId);
  }

  add(live: LiveSandbox): void {
    this.#sandboxes.set(live.row.id, live);
  }

  remove(sandboxId: string): void {
    this.#sandboxes.delete(sandboxId);
  }

  values(): LiveSandbox[] {
    return [...this.#sandboxes.values()];
  }

  /**
   * The prologue of every operation on one sandbox: it must exist, `op` waits for its lock,
   * and it must still exist once the lock is held (a kill may have won the race).
   */
  async locked<T>(sandboxId: string, op: (live: LiveSandbox) => Promise<T>): Promise<T> {
    this.get(sandboxId);
    const queued = performance.now();
    return this.#lock.run(sandboxId, () => {
      addPhase("orchestrator.lock", performance.now() - queued);
      return op(this.get(sandboxId));
    });
  }

  /** Runs `op` under the sandbox's lock whether or not it still exists then. */
  serial<T>(sandboxId: string, op: () => Promise<T>): Promise<T> {
    return this.#lock.run(sandboxId, op);
  }
}

/**
 * Refuses an operation the sandbox's state does not allow, with the reason a client can act
 * on. Under the lock a sandbox is always running or paused: transitions hold the lock.
 */
export function requireState(
  live: LiveSandbox,
  wanted: "running" | "paused",
  message?: string,
): void {
  const { id, state } = live.row;
  if (state === wanted) return;
  if (state === "paused") {
    throw new WarrenError("sandbox_paused", message ?? `sandbox ${id} is paused: resume it first`);
  }
  if (state === "running") {
    throw new WarrenError("sandbox_running", message ?? `sandbox ${id} is already running`);
  }
  throw new WarrenError("sandbox_busy", `sandbox ${id} is ${state}`);
}
