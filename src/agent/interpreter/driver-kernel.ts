import type { DriverProcess } from "./driver-process.js";
import {
  type EventSink,
  type ExecuteRequest,
  type Kernel,
  type KernelEvent,
  kernelExited,
} from "./kernel.js";
import { LineReader } from "./line-reader.js";

/** Longest event line taken from a driver (a PNG is a few MiB); longer is the driver failing. */
const MAX_LINE_BYTES = 64 * 1024 * 1024;
/**
 * An interrupted run still going is interrupted again this often: an interrupt that lands before
 * the driver took the request up (it reads requests between runs) finds it idle and does
 * nothing. Once the run ends no more are sent, and the next request waits for that.
 */
const INTERRUPT_REPEAT_MS = 1_000;

interface Running {
  readonly id: string;
  readonly sink: EventSink;
  readonly done: () => void;
  /** Interrupted again until the run ends (INTERRUPT_REPEAT_MS). */
  interrupting?: NodeJS.Timeout;
}

/**
 * A kernel run by a driver process speaking kernels/PROTOCOL.md: requests in, events out.
 * Its death mid-execution ends that execution with an error; the owner starts a new one
 * (the state is gone either way).
 */
export class DriverKernel implements Kernel {
  readonly ready: Promise<void>;
  readonly #process: DriverProcess;
  /** Names the language in errors: "the python kernel exited…". */
  readonly #language: string;
  #running: Running | undefined;
  #nextId = 1;
  #exited: string | undefined;
  /** Why envd itself stopped the driver, after its own output. */
  #failure = "";

  constructor(language: string, process: DriverProcess) {
    this.#language = language;
    this.#process = process;
    this.ready = new Promise<void>((resolve, reject) => {
      const lines = new LineReader(process.events, MAX_LINE_BYTES);
      lines.onLine = (line) => {
        const event = parseEvent(line);
        if (event === undefined)
          return this.#fail(`sent a line that is not an event: ${line.slice(0, 200)}`);
        if (event.type === "ready") return resolve();
        this.#dispatch(event, lines);
      };
      lines.onOverflow = () => this.#fail(`sent an event line over ${MAX_LINE_BYTES} bytes`);
      process.ended.then((how) => {
        this.#exit(how);
        reject(new Error(this.#why()));
      });
    });
    // An unobserved rejection (a kernel closed before anyone waited) is not a crash.
    this.ready.catch(() => {});
  }

  execute(request: ExecuteRequest, sink: EventSink): Promise<void> {
    if (this.#exited) {
      sink.emit(kernelExited(this.#why()));
      return Promise.resolve();
    }
    const id = String(this.#nextId++);
    return new Promise<void>((resolve) => {
      this.#running = { id, sink, done: resolve };
      const line = JSON.stringify({
        type: "execute",
        id,
        code: request.code,
        env: request.env,
        globals: request.globals,
        silent: request.silent === true,
      });
      this.#process.requests.write(`${line}\n`);
    });
  }

  get alive(): boolean {
    return !this.#exited;
  }

  interrupt(): void {
    const running = this.#running;
    if (!running || this.#exited) return;
    this.#process.interrupt();
    running.interrupting ??= setInterval(() => {
      if (this.#running === running && !this.#exited) this.#process.interrupt();
    }, INTERRUPT_REPEAT_MS);
  }

  close(): void {
    if (!this.#exited) this.#process.kill();
  }

  #dispatch(event: Exclude<DriverEvent, { type: "ready" }>, lines: LineReader): void {
    const running = this.#running;
    if (!running || event.id !== running.id) return; // a late event of an abandoned run
    if (event.type === "done") {
      this.#running = undefined;
      clearInterval(running.interrupting);
      running.done();
      return;
    }
    if (!running.sink.emit(event.event)) {
      lines.pause();
      running.sink.onDrain(() => lines.resume());
    }
  }

  #fail(why: string): void {
    this.#failure = why;
    this.#process.kill();
  }

  #exit(how: string): void {
    if (this.#exited) return;
    this.#exited = how;
    const running = this.#running;
    this.#running = undefined;
    if (running) {
      clearInterval(running.interrupting);
      running.sink.emit(kernelExited(this.#why()));
      running.done();
    }
  }

  #why(): string {
    const output = `${this.#process.diagnostics()}\n${this.#failure}`;
    const tail = output.trim().split("\n").slice(-5).join("\n");
    return `the ${this.#language} kernel ${this.#exited ?? "stopped"}${tail ? `: ${tail}` : ""}`;
  }
}

type DriverEvent =
  | { readonly type: "ready" }
  | { readonly type: "done"; readonly id: string }
  | { readonly type: "event"; readonly id: string; readonly event: KernelEvent };

/** One fd-3 line as an event, or undefined when it is not one the protocol defines. */
function parseEvent(line: string): DriverEvent | undefined {
  let raw: unknown;
  try {
    raw = JSON.parse(line);
  } catch {
    return undefined;
  }
  if (typeof raw !== "object" || raw === null) return undefined;
  const e = raw as Record<string, unknown>;
  if (e.type === "ready") return { type: "ready" };
  if (typeof e.id !== "string") return undefined;
  const id = e.id;
  const text = (key: string) => (typeof e[key] === "string" ? (e[key] as string) : "");
  switch (e.type) {
    case "done":
      return { type: "done", id };
    case "execution_count":
      return typeof e.count === "number"
        ? { type: "event", id, event: { type: "execution_count", count: e.count } }
        : undefined;
    case "stdout":
    case "stderr":
      return { type: "event", id, event: { type: e.type, text: text("text") } };
    case "error":
      return {
        type: "event",
        id,
        event: {
          type: "error",
          name: text("name"),
          value: text("value"),
          traceback: text("traceback"),
        },
      };
    case "result":
      if (typeof e.data !== "object" || e.data === null || Array.isArray(e.data)) return undefined;
      return {
        type: "event",
        id,
        event: { type: "result", main: e.main === true, data: e.data as Record<string, unknown> },
      };
    default:
      return undefined;
  }
}
