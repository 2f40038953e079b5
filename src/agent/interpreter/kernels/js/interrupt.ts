import { setTimeout } from "node:timers";
import { Worker } from "node:worker_threads";

/**
 * Interrupts for a kernel whose main thread may be busy in user code, where no JavaScript
 * handler can run. A "sentry" worker thread owns fd 0: it passes each request line to the
 * main thread, and takes `{"type":"interrupt"}` (PROTOCOL.md) itself. Then, through an
 * inspector session on the main thread (served even while that thread is busy: V8 runs it
 * as an interrupt):
 *
 * 1. it evaluates the kernel's handler on the main thread, which ends the running execution
 *    (error + done) and says whether JavaScript was running under it (busy) or not (idle,
 *    e.g. a cell waiting on a promise, which is then abandoned);
 * 2. if busy, it sends `Runtime.terminateExecution`: V8 unwinds the running JavaScript (a loop
 *    after an `await`, a timer callback) and the event loop goes on. The handler waits until
 *    the sentry has sent it: Node dispatches messages that arrive during a dispatch in the
 *    same round, so the termination lands on the code the handler interrupted, never on
 *    whatever would run next once that code had finished by itself.
 *
 * Not SIGINT: Node can only catch a signal on a busy thread with `breakOnSigint` watchdogs,
 * and between two of them SIGINT's default action is back — a burst of signals killed the
 * kernel, or left it deaf (CI's js-kernel hangs). A request line has no such window.
 *
 * If the main thread is blocked outside JavaScript (execSync waiting for a child), the
 * handler cannot run: after 300 ms, and every second after that, the sentry sends SIGINT to
 * the process's descendants, as a terminal's Ctrl-C would reach them (background ones too:
 * a limitation). Without an inspector (a Node built without one) the sentry only posts a
 * message, handled once the main thread is free.
 */

/** Shared Int32Array slots. */
const STOP = 0;
const VERDICT = 1;
/** Set by the sentry once it has sent the termination. */
const SENT = 2;
/** 1 while an execution runs (set by the main thread): an interrupt between two is dropped. */
const RUNNING = 3;
/** VERDICT values. */
const PENDING = 1;
const IDLE = 2;
const TERMINATE = 3;

const HANDLER_KEY = "warren.kernel.interrupt";

/** CommonJS, run by `new Worker(..., {eval: true})`: the bundle stays one file. */
const SENTRY_SOURCE = `"use strict";
const { parentPort, workerData } = require("node:worker_threads");
const net = require("node:net");
const fs = require("node:fs");
const { ctl, expression } = workerData;
const [STOP, VERDICT, SENT, RUNNING, PENDING, TERMINATE] = [${STOP}, ${VERDICT}, ${SENT}, ${RUNNING}, ${PENDING}, ${TERMINATE}];
let session;
try {
  session = new (require("node:inspector").Session)();
  session.connectToMainThread();
} catch {
  session = undefined;
}

/** SIGINT to every descendant (a shell and what it runs): they hold execSync's pipes. */
function signalChildren(pid = process.pid) {
  const root = "/proc/" + pid + "/task";
  let tasks = [];
  try { tasks = fs.readdirSync(root); } catch {}
  for (const task of tasks) {
    let children = "";
    try { children = fs.readFileSync(root + "/" + task + "/children", "utf8"); } catch {}
    for (const child of children.split(" ").filter(Boolean)) {
      signalChildren(Number(child));
      try { process.kill(Number(child), "SIGINT"); } catch {}
    }
  }
}

function interrupt() {
  // Nothing runs (a repeat that came after the run ended): evaluating now would run into the
  // termination the last interrupt sent, and its verdict would never come.
  if (Atomics.load(ctl, RUNNING) === 0) return;
  if (!session) return parentPort.postMessage({ interrupt: true });
  Atomics.store(ctl, VERDICT, PENDING);
  Atomics.store(ctl, SENT, 0);
  session.post("Runtime.evaluate", { expression });
  let signalled = 0;
  for (;;) {
    Atomics.wait(ctl, VERDICT, PENDING, 300);
    if (Atomics.load(ctl, STOP) !== 0) return;
    const verdict = Atomics.load(ctl, VERDICT);
    if (verdict === TERMINATE) {
      session.post("Runtime.terminateExecution");
      Atomics.store(ctl, SENT, 1);
      Atomics.notify(ctl, SENT);
    }
    if (verdict !== PENDING) return;
    if (Date.now() - signalled >= 1000) {
      signalChildren();
      signalled = Date.now();
    }
  }
}

function isInterrupt(line) {
  try {
    const request = JSON.parse(line);
    return request !== null && typeof request === "object" && request.type === "interrupt";
  } catch {
    return false;
  }
}

const input = new net.Socket({ fd: 0, readable: true, writable: false });
input.setEncoding("utf8");
let partial = "";
input.on("data", (chunk) => {
  const lines = (partial + chunk).split("\\n");
  partial = lines.pop();
  for (const line of lines) {
    if (isInterrupt(line)) interrupt();
    else parentPort.postMessage({ line });
  }
});
input.on("error", () => {});
input.once("close", () => parentPort.postMessage({ end: true }));
parentPort.on("message", (message) => {
  if (message !== "stop") return;
  input.destroy();
  if (session) session.disconnect();
  parentPort.close();
});
parentPort.postMessage({ armed: true });
`;

/** What the sentry hands the main thread. */
export interface SentryHandlers {
  /** An interrupt; `busy`: JavaScript was running under it (called as an interrupt). */
  readonly onInterrupt: (busy: boolean) => void;
  /** A request line other than an interrupt, in order. */
  readonly onLine: (line: string) => void;
  /** fd 0 has ended: envd is done with this kernel. */
  readonly onEnd: () => void;
}

export interface Sentry {
  /** Says whether an execution runs: an interrupt between two is nothing to stop. */
  running(on: boolean): void;
  /** Ends the sentry (before the process exits, so no inspector session is left open). */
  stop(): Promise<void>;
}

/** Starts the sentry; resolves once it reads fd 0. */
export function startSentry(handlers: SentryHandlers): Promise<Sentry> {
  const ctl = new Int32Array(new SharedArrayBuffer(4 * Int32Array.BYTES_PER_ELEMENT));
  const clearAsyncIdStack = asyncIdStackClearer();
  const handler = () => {
    let busy = false;
    try {
      // Between executions the code under us is the driver's own: never terminated.
      if (Atomics.load(ctl, RUNNING) === 0) return;
      busy = runningUnder();
      // A callback cut short leaves its async id pushed; Node would abort on the mismatch.
      if (busy) clearAsyncIdStack();
      handlers.onInterrupt(busy);
    } finally {
      Atomics.store(ctl, VERDICT, busy ? TERMINATE : IDLE);
      Atomics.notify(ctl, VERDICT);
      if (busy) Atomics.wait(ctl, SENT, 0, 2000);
    }
  };
  Object.defineProperty(globalThis, Symbol.for(HANDLER_KEY), {
    value: handler,
    configurable: true,
  });
  const worker = new Worker(SENTRY_SOURCE, {
    eval: true,
    // `this`, the global object: a cell may have replaced `globalThis`.
    workerData: { ctl, expression: `this[Symbol.for(${JSON.stringify(HANDLER_KEY)})]()` },
    stdout: false,
    stderr: false,
  });
  const exited = new Promise<void>((resolve) => worker.once("exit", () => resolve()));
  return new Promise<Sentry>((resolve, reject) => {
    worker.on(
      "message",
      (message: { armed?: true; line?: string; end?: true; interrupt?: true }) => {
        if (message.line !== undefined) handlers.onLine(message.line);
        else if (message.interrupt) handlers.onInterrupt(false);
        else if (message.end) handlers.onEnd();
        else if (message.armed) resolve({ running, stop });
      },
    );
    worker.once("error", reject);
    worker.once("exit", (code) => reject(new Error(`the interrupt sentry exited (${code})`)));
  });

  function running(on: boolean): void {
    Atomics.store(ctl, RUNNING, on ? 1 : 0);
  }

  async function stop(): Promise<void> {
    Atomics.store(ctl, STOP, 1);
    Atomics.notify(ctl, VERDICT);
    worker.postMessage("stop");
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 1000).unref())]);
  }
}

const { captureStackTrace } = Error;

/**
 * Whether the handler was called from inside running JavaScript (an interrupt) rather than
 * from the idle event loop: below the handler and the evaluated expression, any frame.
 */
function runningUnder(): boolean {
  const limit = Error.stackTraceLimit;
  const prepare = Error.prepareStackTrace;
  try {
    Error.stackTraceLimit = 4;
    Error.prepareStackTrace = (_error, frames) => frames.length;
    const probe: { stack?: unknown } = {};
    captureStackTrace(probe, runningUnder);
    return (probe.stack as number) > 2;
  } finally {
    Error.stackTraceLimit = limit;
    Error.prepareStackTrace = prepare;
  }
}

/** Node's own async-id stack reset (what it does after an uncaught exception). */
function asyncIdStackClearer(): () => void {
  const internals = process as unknown as {
    noDeprecation?: boolean;
    binding(name: string): unknown;
  };
  const quiet = internals.noDeprecation;
  try {
    internals.noDeprecation = true; // process.binding is deprecated; async_wrap has no public twin
    const binding = internals.binding("async_wrap") as { clearAsyncIdStack?: () => void };
    return typeof binding.clearAsyncIdStack === "function" ? binding.clearAsyncIdStack : () => {};
  } catch {
    return () => {};
  } finally {
    internals.noDeprecation = quiet;
  }
}
