/**
 * The JavaScript/TypeScript kernel driver: runs one context's cells statefully in this
 * process's global scope and speaks kernels/PROTOCOL.md with envd (requests on fd 0, events
 * on fd 3, output of fd 1/2 as stdout/stderr events, `{"type":"interrupt"}` requests).
 *
 * Started as `node js-kernel.mjs [--language javascript|typescript]`; both languages take
 * TypeScript syntax (types are stripped) and behave the same.
 *
 * Cells share this process's global scope, so the driver's modules import `process`,
 * `Buffer` and timers rather than use the globals a cell may redefine (`const process = 1`).
 */

import fs from "node:fs";
import { dirname } from "node:path";
import process from "node:process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { inspect, types } from "node:util";
import vm from "node:vm";
import { MessageChannel } from "node:worker_threads";
import { CellSyntaxError, HELPER_KEY, transformCell } from "./cell-transform.js";
import { EventWriter } from "./events.js";
import { startSentry } from "./interrupt.js";
import { cellRequire, importMeta, importModule } from "./modules.js";
import { captureOutput } from "./output.js";

interface ExecuteRequest {
  readonly id: string;
  readonly code: string;
  readonly env: Readonly<Record<string, string>>;
  readonly globals: Readonly<Record<string, string>>;
  readonly silent: boolean;
}

interface Execution {
  readonly id: string;
  /** The env keys this run set and what they were before. */
  readonly restore: ReadonlyMap<string, string | undefined>;
}

/** What a cell ended with when an interrupt stopped it (the name E2B's kernels give). */
const INTERRUPTED = {
  name: "KeyboardInterrupt",
  value: "Execution interrupted (SIGINT)",
  traceback: "KeyboardInterrupt: execution interrupted (SIGINT)",
};

/** Stack lines of this driver's own files are not the user's business. */
const DRIVER_DIR = dirname(fileURLToPath(import.meta.url));

const events = new EventWriter();
// Taken before they are replaced (below) or user code replaces them.
const { stringify, parse } = JSON;
const writeSync = fs.writeSync;
const queue: ExecuteRequest[] = [];
let current: Execution | undefined;
let executionCount = 0;
let cellNumber = 0;
/** Each cell's last script line: the wrapper's call, not the user's code. */
const wrapperLines = new Map<number, number>();
let previousGlobals: Readonly<Record<string, string>> = {};

captureOutput((stream, text) => {
  // Output written while nothing runs is dropped (PROTOCOL.md).
  if (current) events.output(current.id, stream, text);
});
installGlobals();
process.on("uncaughtException", (err) => {
  if (brokeImmediateQueue(err)) {
    // It would throw this at every turn of the event loop from now on: a kernel that never
    // runs again. Exiting says so, and envd starts a new one for the next run.
    diagnostic(
      "an interrupt cut short a setImmediate callback that was not the first of its turn; Node's immediate queue cannot recover: exiting",
    );
    process.exit(1);
  }
  reportStray("Uncaught", err);
});
// Node warns once about the loader cells import with: now, while the warning goes nowhere.
await importModule("node:path");
process.on("unhandledRejection", (reason) => reportStray("Unhandled promise rejection:", reason));

/** Ends the running execution as interrupted (PROTOCOL.md: `{"type":"interrupt"}`). */
function interrupted(busy: boolean): void {
  if (current) finish(current, { type: "error", ...INTERRUPTED });
  // A cut-short callback may have been ours, about to start the next request.
  if (busy) schedulePump();
}

function takeRequest(line: string): void {
  const request = parseRequest(line);
  if (request === "interrupt") interrupted(false);
  else if (!request) diagnostic(`ignoring a request that is not one: ${line.slice(0, 200)}`);
  else {
    queue.push(request);
    schedulePump();
  }
}

/**
 * Cells start from a message of the driver's own, never from a setImmediate callback: an
 * interrupt terminates a busy cell mid-callback, and Node's immediate queue does not survive
 * that unless the callback was the first of its round (`processImmediate` then throws at every
 * turn of the event loop: CI's js-kernel hang). A port's message is dequeued before it is
 * dispatched, and a cut-short dispatch is only rescheduled.
 */
const starter = new MessageChannel();
starter.port2.on("message", pump);
starter.port2.unref();

function schedulePump(): void {
  starter.port1.postMessage(null);
}

const end = () => {
  void (sentry?.stop() ?? Promise.resolve()).finally(() => process.exit(0));
};
const sentry = await startSentry({
  onInterrupt: interrupted,
  onLine: takeRequest,
  onEnd: end,
}).catch((err: unknown) => {
  // Without it only a run waiting on a promise can be interrupted; the rest still works.
  diagnostic(`no interrupt sentry (${String(err)}); busy code cannot be interrupted`);
  const requests = createInterface({ input: process.stdin, crlfDelay: Number.POSITIVE_INFINITY });
  requests.on("line", takeRequest);
  requests.on("close", end);
  return undefined;
});
events.emit({ type: "ready" });

/** Starts the next request if none runs. */
function pump(): void {
  if (current) return;
  const request = queue.shift();
  if (request) execute(request);
}

function execute(request: ExecuteRequest): void {
  const restore = applyEnv(request);
  const execution: Execution = { id: request.id, restore };
  current = execution;
  sentry?.running(true);
  if (!request.silent) {
    executionCount += 1;
    events.emit({ type: "execution_count", id: request.id, count: executionCount });
  }
  let promise: Promise<unknown>;
  cellNumber += 1;
  try {
    const cell = transformCell(request.code);
    wrapperLines.set(cellNumber, cell.code.split("\n").length);
    const script = new vm.Script(cell.code, {
      filename: `<cell ${cellNumber}>`,
      columnOffset: -cell.prefixLength,
      importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
    });
    // The sentry stops a busy synchronous part too (even one blocked in execSync).
    promise = script.runInThisContext() as Promise<unknown>;
  } catch (err) {
    finish(execution, errorEvent(err));
    return;
  }
  promise.then(
    (value) => {
      if (current !== execution) return; // interrupted meanwhile: abandoned
      let outcome: Outcome | undefined;
      try {
        outcome = value === undefined ? undefined : resultEvent(value);
      } catch (err) {
        outcome = errorEvent(err); // a custom inspect that throws
      }
      finish(execution, outcome);
    },
    (err: unknown) => {
      if (current === execution) finish(execution, errorEvent(err));
    },
  );
}

type Outcome =
  | { type: "result"; data: Record<string, unknown> }
  | { type: "error"; name: string; value: string; traceback: string };

/** Ends an execution (once): its outcome, its env put back, then `done`. */
function finish(execution: Execution, outcome: Outcome | undefined): void {
  if (current !== execution) return;
  if (outcome?.type === "result") {
    events.emit({ type: "result", id: execution.id, main: true, data: outcome.data });
  } else if (outcome?.type === "error") {
    events.emit({ ...outcome, id: execution.id });
  }
  restoreEnv(execution.restore);
  current = undefined;
  sentry?.running(false);
  events.emit({ type: "done", id: execution.id });
  schedulePump();
}

/** Sets `globals` for good (dropping the previous run's that are gone) and `env` for this run. */
function applyEnv(request: ExecuteRequest): Map<string, string | undefined> {
  for (const key of Object.keys(previousGlobals)) {
    if (!(key in request.globals)) delete process.env[key];
  }
  for (const [key, value] of Object.entries(request.globals)) process.env[key] = value;
  previousGlobals = request.globals;
  const restore = new Map<string, string | undefined>();
  for (const [key, value] of Object.entries(request.env)) {
    restore.set(key, process.env[key]);
    process.env[key] = value;
  }
  return restore;
}

function restoreEnv(restore: ReadonlyMap<string, string | undefined>): void {
  for (const [key, value] of restore) {
    if (value === undefined) delete process.env[key];
    else process.env[key] = value;
  }
}

/** The MIME bundle of a cell's value: `util.inspect`, or what the value says of itself. */
function resultEvent(value: unknown): Outcome {
  const data: Record<string, unknown> = {};
  const display = (value as Record<symbol, unknown> | null)?.[Symbol.for("Jupyter.display")];
  if (typeof display === "function") {
    const bundle: unknown = display.call(value);
    if (typeof bundle === "object" && bundle !== null) Object.assign(data, bundle);
  }
  data["text/plain"] ??= inspect(value);
  // Only what survives JSON: envd parses the line back.
  return { type: "result", data: parse(stringify(data)) as Record<string, unknown> };
}

function errorEvent(err: unknown): Outcome {
  try {
    return describeError(err);
  } catch {
    return {
      type: "error",
      name: "Error",
      value: "(an error that cannot be described)",
      traceback: "",
    };
  }
}

function describeError(err: unknown): Outcome {
  if (err instanceof CellSyntaxError) {
    const excerpt = err.excerpt ? `${err.excerpt}\n\n` : "";
    return {
      type: "error",
      name: err.name,
      value: err.message,
      traceback: `${excerpt}SyntaxError: ${err.message}`,
    };
  }
  if (types.isNativeError(err) || (typeof err === "object" && err !== null && "stack" in err)) {
    const e = err as Error;
    return {
      type: "error",
      name: String(e.name ?? "Error"),
      value: String(e.message ?? ""),
      traceback: cleanStack(typeof e.stack === "string" ? e.stack : String(e)),
    };
  }
  const shown = inspect(err);
  return { type: "error", name: "Error", value: shown, traceback: `Uncaught ${shown}` };
}

/** The user's part of a stack: without the wrapper's frames, and nothing of the driver's. */
function cleanStack(stack: string): string {
  const lines = stack.split("\n");
  // Below the vm call is the driver starting the cell.
  const vmFrame = lines.findIndex((line) => /^\s+at .*\bnode:vm:/.test(line));
  return lines
    .slice(0, vmFrame === -1 ? undefined : vmFrame)
    .filter((line) => {
      if (!/^\s+at /.test(line)) return true;
      const cell = /^\s+at <cell (\d+)>:(\d+):\d+$/.exec(line);
      if (cell && wrapperLines.get(Number(cell[1])) === Number(cell[2])) return false;
      return !line.includes(DRIVER_DIR);
    })
    .join("\n");
}

/** An exception or rejection nobody waited for: shown on stderr of the run in progress. */
function reportStray(what: string, reason: unknown): void {
  let text: string;
  try {
    text = types.isNativeError(reason)
      ? cleanStack(reason.stack ?? String(reason))
      : inspect(reason);
  } catch {
    text = "(a value that cannot be shown)";
  }
  if (current) events.output(current.id, "stderr", `${what} ${text}\n`);
  else diagnostic(`${what} ${text}`);
}

/** Node's own immediate loop failing, not a callback it ran: what a termination leaves. */
function brokeImmediateQueue(err: unknown): boolean {
  // Not `instanceof TypeError`: a cell may have replaced the global.
  const stack = types.isNativeError(err) ? String(err.stack) : "";
  const top = stack.split("\n").find((line) => line.trimStart().startsWith("at "));
  return (
    stack.startsWith("TypeError") &&
    /^\s*at (process\.)?processImmediate \(node:internal\/timers/.test(top ?? "")
  );
}

/** A line for envd's diagnostic tail (the driver's own fd 2). */
function diagnostic(text: string): void {
  try {
    writeSync(2, `js-kernel: ${text}\n`);
  } catch {
    // nowhere left to say it
  }
}

/** What cells see besides the usual globals: `require`, and the helper the transform uses. */
function installGlobals(): void {
  Object.defineProperty(globalThis, Symbol.for(HELPER_KEY), {
    value: {
      import: importModule,
      get meta() {
        return importMeta();
      },
    },
    configurable: true,
  });
  Object.defineProperty(globalThis, "require", {
    value: cellRequire,
    writable: true,
    configurable: true,
  });
}

function parseRequest(line: string): ExecuteRequest | "interrupt" | undefined {
  let raw: unknown;
  try {
    raw = parse(line);
  } catch {
    return undefined;
  }
  if (typeof raw !== "object" || raw === null) return undefined;
  const r = raw as Record<string, unknown>;
  if (r.type === "interrupt") return "interrupt";
  if (r.type !== "execute" || typeof r.id !== "string" || typeof r.code !== "string")
    return undefined;
  return {
    id: r.id,
    code: r.code,
    env: stringRecord(r.env),
    globals: stringRecord(r.globals),
    silent: r.silent === true,
  };
}

function stringRecord(value: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (typeof value !== "object" || value === null) return out;
  for (const [key, v] of Object.entries(value)) if (typeof v === "string") out[key] = v;
  return out;
}
