import { WarrenError } from "../../shared/index.js";
import type { ManagedProcess } from "./managed-process.js";

/** How long an ended process stays reachable, so a late Connect still receives its end. */
const ENDED_RETENTION_MS = 30_000;

export type Selector = { readonly pid: number } | { readonly tag: string };

/** Processes by pid and tag: running ones, plus recently ended ones for late Connects. */
export class ProcessRegistry {
  #byPid = new Map<number, ManagedProcess>();

  add(proc: ManagedProcess): void {
    this.#byPid.set(proc.pid, proc);
    proc.onEnd(() => {
      setTimeout(() => {
        if (this.#byPid.get(proc.pid) === proc) this.#byPid.delete(proc.pid);
      }, ENDED_RETENTION_MS).unref();
    });
  }

  running(): ManagedProcess[] {
    return [...this.#byPid.values()].filter((p) => !p.ended);
  }

  /** Finds a process by pid or tag; `not_found` when none (ended ones only if `includeEnded`). */
  get(selector: Selector, includeEnded = false): ManagedProcess {
    const candidates = [...this.#byPid.values()].filter((p) => includeEnded || !p.ended);
    const found =
      "pid" in selector
        ? candidates.find((p) => p.pid === selector.pid)
        : (candidates.find((p) => p.spec.tag === selector.tag && !p.ended) ??
          candidates.find((p) => p.spec.tag === selector.tag));
    if (!found) {
      const what = "pid" in selector ? `pid ${selector.pid}` : `tag '${selector.tag}'`;
      throw new WarrenError("not_found", `process with ${what} not found`);
    }
    return found;
  }

  /** Stops every running process (agent shutdown). */
  killAll(): void {
    for (const proc of this.running()) proc.signal("SIGKILL");
  }
}
