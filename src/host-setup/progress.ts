/** Something progress text can be written to: `process.stderr`, a test's collector. */
export interface ProgressSink {
  write(text: string): unknown;
}

/** "41 s", "2.3 s", "120 ms": the unit always spelled out. */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms / 1000)} s`;
}

/**
 * Progress lines of one setup run, on stderr by default:
 * `setup: [5/6] base rootfs: debootstrap bookworm ... (41 s)`. Every line carries its duration.
 */
export class SetupProgress {
  readonly #sink: ProgressSink | null;
  readonly #total: number;

  constructor(sink: ProgressSink | null, total: number) {
    this.#sink = sink;
    this.#total = total;
  }

  step(index: number, name: string): StepProgress {
    return new StepProgress(this.#sink, `setup: [${index}/${this.#total}] ${name}`);
  }

  line(text: string): void {
    this.#sink?.write(`setup: ${text}\n`);
  }
}

export class StepProgress {
  readonly #sink: ProgressSink | null;
  readonly #prefix: string;

  constructor(sink: ProgressSink | null, prefix: string) {
    this.#sink = sink;
    this.#prefix = prefix;
  }

  /** A finished fact: `setup: [2/6] kernel: 6.1.0-57-cloud-amd64 up to date (3 ms)`. */
  done(text: string, durationMs: number): void {
    this.#sink?.write(`${this.#prefix}: ${text} (${formatDuration(durationMs)})\n`);
  }

  /** A line without a duration, announcing what follows: `agent drive: building (input changed)`. */
  info(text: string): void {
    this.#sink?.write(`${this.#prefix}: ${text}\n`);
  }

  /** Runs one piece of work, printing `label ...` before and its duration (or failure) after. */
  async task<T>(label: string, work: () => Promise<T>): Promise<T> {
    const started = performance.now();
    this.#sink?.write(`${this.#prefix}: ${label} ...`);
    try {
      const result = await work();
      this.#sink?.write(` (${formatDuration(performance.now() - started)})\n`);
      return result;
    } catch (err) {
      this.#sink?.write(` failed (${formatDuration(performance.now() - started)})\n`);
      throw err;
    }
  }
}
