import { closeSync, openSync, writeSync } from "node:fs";

/**
 * Crash points: named places in the server where a test can make the process die as a
 * power cut or `kill -9` would, to check what a restart makes of what it left. Both
 * variables are read once, when this module loads:
 *
 * - `WARREN_CRASH_AT=<point>[:<n>]`: the n-th time (default the first) the process passes
 *   `crashPoint("<point>")`, it SIGKILLs itself: no handler, no `finally`, no flush runs.
 * - `WARREN_CRASH_TRACE=<file>`: every point passed is appended to the file, one name a
 *   line, written synchronously (the order is the order they were passed, and a crash
 *   right after loses nothing), so a harness can discover the points an operation passes.
 *
 * Unset (every real server), `crashPoint` is an empty function: a call costs nothing worth
 * measuring, so points can sit on hot paths.
 */
export interface CrashSettings {
  /** The point to die at and at which pass (1-based). */
  readonly at?: { readonly point: string; readonly pass: number };
  /** The file every point passed is appended to. */
  readonly trace?: string;
}

/** Reads the settings from the environment; a malformed WARREN_CRASH_AT throws, naming it. */
export function crashSettings(env: NodeJS.ProcessEnv = process.env): CrashSettings {
  const at = env.WARREN_CRASH_AT?.trim();
  const trace = env.WARREN_CRASH_TRACE?.trim();
  const settings: { at?: CrashSettings["at"]; trace?: string } = {};
  if (trace) settings.trace = trace;
  if (at) {
    const match = /^([a-z0-9][a-z0-9._-]*)(?::([1-9]\d*))?$/.exec(at);
    if (!match?.[1]) {
      throw new Error(`WARREN_CRASH_AT=${JSON.stringify(at)} is invalid: expected <point>[:<n>]`);
    }
    settings.at = { point: match[1], pass: Number(match[2] ?? 1) };
  }
  return settings;
}

/** A crashPoint function for these settings (the module's own is made once, at load). */
export function makeCrashPoint(settings: CrashSettings): (point: string) => void {
  const { at, trace } = settings;
  if (!at && !trace) return () => {};
  // Opened once: an append per point, no open per call.
  const fd = trace ? openSync(trace, "a") : undefined;
  let passes = 0;
  return (point: string) => {
    if (fd !== undefined) writeSync(fd, `${point}\n`);
    if (point !== at?.point || ++passes !== at.pass) return;
    writeSync(2, `warren: crash point ${point}:${at.pass} reached, killing the process\n`);
    if (fd !== undefined) closeSync(fd);
    process.kill(process.pid, "SIGKILL");
  };
}

/** Dies here when WARREN_CRASH_AT names this point (and pass); records it under WARREN_CRASH_TRACE. */
export const crashPoint: (point: string) => void = makeCrashPoint(crashSettings());
