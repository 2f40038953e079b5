/**
 * Request values → service arguments: durations in seconds, query-string numbers and
 * dates, sandbox ids. Every failure is a WarrenError whose message starts with the field,
 * in the same form as schema errors ("body/timeout must be …").
 */
import { WarrenError } from "../shared/errors.js";

/** Sandbox ids are lower-case alphanumerics; anything else cannot name a sandbox. */
const SANDBOX_ID = /^[a-z0-9]+$/;

export function invalid(field: string, problem: string): WarrenError {
  return new WarrenError("invalid_argument", `${field} ${problem}`);
}

/** The sandbox id of a path, or not_found when it cannot be one. */
export function checkSandboxId(sandboxId: string): string {
  if (!SANDBOX_ID.test(sandboxId)) {
    const shown = sandboxId.length > 64 ? `${sandboxId.slice(0, 64)}…` : sandboxId;
    throw new WarrenError("not_found", `sandbox "${shown}" not found`);
  }
  return sandboxId;
}

/**
 * A duration in whole seconds (already an integer per the schema) → ms, in [0, maxMs]. 0 is
 * E2B's minimum too: the deadline is now (the sandbox ends as soon as it is up).
 */
export function secondsToMs(field: string, seconds: number, maxMs: number): number {
  if (seconds < 0) throw invalid(field, "must be 0 or more (seconds)");
  const ms = seconds * 1000;
  if (ms > maxMs) throw invalid(field, `must be at most ${Math.floor(maxMs / 1000)} (seconds)`);
  return ms;
}

/** An optional duration in seconds → ms, or undefined when absent. */
export function optionalSecondsToMs(
  field: string,
  seconds: number | undefined,
  maxMs: number,
): number | undefined {
  return seconds === undefined ? undefined : secondsToMs(field, seconds, maxMs);
}

const DECIMAL = /^(0|[1-9][0-9]*)$/;

/** A non-negative decimal integer from the query string, within [min, max]. */
export function queryInteger(
  name: string,
  value: string | undefined,
  range: { min: number; max: number },
): number | undefined {
  if (value === undefined) return undefined;
  const field = `querystring/${name}`;
  if (!DECIMAL.test(value)) throw invalid(field, "must be a non-negative integer");
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < range.min || n > range.max) {
    throw invalid(field, `must be between ${range.min} and ${range.max}`);
  }
  return n;
}

const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/** An RFC 3339 date-time from the query string. */
export function queryDateTime(name: string, value: string | undefined): Date | undefined {
  if (value === undefined) return undefined;
  const ms = RFC3339.test(value) ? Date.parse(value) : Number.NaN;
  if (Number.isNaN(ms)) throw invalid(`querystring/${name}`, "must be an RFC 3339 date-time");
  return new Date(ms);
}

/** Largest unix time (seconds) a Date can hold. */
const MAX_UNIX_SECONDS = 8_640_000_000_000;

/** Unix seconds from the query string → Date. */
export function queryUnixSeconds(name: string, value: string | undefined): Date | undefined {
  const seconds = queryInteger(name, value, { min: 0, max: MAX_UNIX_SECONDS });
  return seconds === undefined ? undefined : new Date(seconds * 1000);
}

/** Unix milliseconds from the query string → Date. */
export function queryUnixMillis(name: string, value: string | undefined): Date | undefined {
  const ms = queryInteger(name, value, { min: 0, max: MAX_UNIX_SECONDS * 1000 });
  return ms === undefined ? undefined : new Date(ms);
}
