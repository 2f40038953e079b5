import { createWriteStream, mkdirSync, readFileSync, type WriteStream } from "node:fs";
import { join } from "node:path";

export type LogLevel = "debug" | "info" | "warn" | "error";

/** E2B's BuildLogEntry: `step` is "base", a step number, or "finalize". */
export interface LogEntry {
  readonly timestamp: string;
  readonly level: LogLevel;
  readonly message: string;
  readonly step?: string;
}

const LEVELS: readonly LogLevel[] = ["debug", "info", "warn", "error"];
/** Entries kept per build; past it the log says what was dropped. */
const MAX_ENTRIES = 50_000;
/**
 * Characters of messages kept per build, all entries together: a step's output lines are
 * cut at 8 KiB each, but 50 000 of them would still be 400 MB held in memory for a guest
 * printing without end. Past it, as past MAX_ENTRIES, lines are counted and dropped.
 */
const MAX_CHARS = 16 * 1024 * 1024;

/**
 * One build's log: appended while it runs (each entry also to `<dir>/<build id>.jsonl`, so
 * a finished build's log outlives a restart), read by offset (the status call) or by time
 * (the logs call).
 */
export class BuildLog {
  readonly #entries: LogEntry[];
  readonly #file: string;
  /** Opened on the first entry: a loaded log is only read. */
  #out?: WriteStream;
  #dropped = 0;
  #chars = 0;

  private constructor(file: string, entries: LogEntry[]) {
    this.#file = file;
    this.#entries = entries;
  }

  static create(dir: string, buildId: string): BuildLog {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    return new BuildLog(join(dir, `${buildId}.jsonl`), []);
  }

  /** The log a build left on disk; empty when it has none. */
  static load(dir: string, buildId: string): BuildLog {
    const file = join(dir, `${buildId}.jsonl`);
    let text = "";
    try {
      text = readFileSync(file, "utf8");
    } catch {
      // no log yet
    }
    const entries = text
      .split("\n")
      .filter((line) => line !== "")
      .map((line) => JSON.parse(line) as LogEntry);
    return new BuildLog(file, entries);
  }

  add(level: LogLevel, message: string, step?: string): void {
    if (this.#entries.length >= MAX_ENTRIES || this.#chars + message.length > MAX_CHARS) {
      this.#dropped++;
    } else this.#append(level, message, step);
  }

  /** Ends the log: says how many lines did not fit. */
  close(): void {
    if (this.#dropped > 0) {
      this.#append(
        "warn",
        `${this.#dropped} log lines were dropped (a log keeps ${MAX_ENTRIES} lines, ${MAX_CHARS} characters)`,
      );
      this.#dropped = 0;
    }
    this.#out?.end();
    this.#out = undefined;
  }

  #append(level: LogLevel, message: string, step?: string): void {
    const entry: LogEntry = {
      timestamp: new Date().toISOString(),
      level,
      message,
      ...(step !== undefined && { step }),
    };
    this.#entries.push(entry);
    this.#chars += message.length;
    this.#out ??= createWriteStream(this.#file, { flags: "a", mode: 0o600 });
    this.#out.write(`${JSON.stringify(entry)}\n`);
  }

  /** Entries from `offset`, at most `limit`. */
  from(offset: number, limit: number): LogEntry[] {
    return this.#entries.slice(offset, offset + limit);
  }

  /**
   * Entries at or after (forward) / at or before (backward) `cursor` (ms since the epoch),
   * at least `level`, at most `limit`, oldest first.
   */
  query(options: {
    cursor?: number;
    limit: number;
    direction: "forward" | "backward";
    level?: LogLevel;
  }): LogEntry[] {
    const min = LEVELS.indexOf(options.level ?? "debug");
    const wanted = this.#entries.filter((e) => {
      if (LEVELS.indexOf(e.level) < min) return false;
      if (options.cursor === undefined) return true;
      const at = Date.parse(e.timestamp);
      return options.direction === "forward" ? at >= options.cursor : at <= options.cursor;
    });
    return options.direction === "forward"
      ? wanted.slice(0, options.limit)
      : wanted.slice(Math.max(0, wanted.length - options.limit));
  }

  /** The last entries, for a failure's reason. */
  tail(count: number): LogEntry[] {
    return this.#entries.slice(-count);
  }
}
