import process from "node:process";
import { setTimeout } from "node:timers";
import { Worker } from "node:worker_threads";

/**
 * SIGINT for a kernel whose main thread may be busy in user code, where no JavaScript signal
 * handler can run. A "sentry" worker thread catches the signal instead and, through an
 * inspector session on the main thread (served even while that thread is busy: V8 runs it
 * as an interrupt):
 *
 * 1. evaluates the kernel's handler on the main thread, which ends the running execution
 *    (error + done) and says whether JavaScript was running under it (busy) or not (idle,
 *    e.g. a cell waiting on a promise, which is then abandoned);
 * 2. if busy, sends `Runtime.terminateExecution`: V8 unwinds the running JavaScript (a loop
 *    after an `await`, a timer callback) and the event loop goes on. The handler waits until
 *    the sentry has sent it: Node dispatches messages that arrive during a dispatch in the
 *    same round, so the termination lands on the code the handler interrupted, never on
 *    whatever would run next once that code had finished by itself.
 *
 * The sentry sees SIGINT by sleeping inside `vm.runInThisContext(..., {breakOnSigint})`
 * (Node's SIGINT watchdog, a thread of its own that outlives a busy main thread). Its calls
 * are nested so that one watchdog is always active: Node puts back the default SIGINT action
 * (death) only when the last one stops. A `process.on("SIGINT")` in user code takes the
 * signal away from it (and, once removed, leaves the default action): a limitation.
 *
 * If the main thread is blocked outside JavaScript (execSync waiting for a child), the
 * handler cannot run: after 300 ms the sentry sends SIGINT to the process's descendants, as
 * a terminal's Ctrl-C would reach them (background ones too: a limitation), and goes on
 * waiting. Without an inspector (a Node built without one) the sentry only posts a message,
 * handled once the main thread is free.
 */

/** Shared Int32Array slots. */
const STOP = 0;
const VERDICT = 1;
/** Set by the sentry once it has sent the termination. */
const SENT = 2;
/** VERDICT values. */
const PENDING = 1;
const IDLE = 2;
const TERMINATE = 3;

const HANDLER_KEY = "warren.kernel.sigint";

/** CommonJS, run by `new Worker(..., {eval: true})`: the bundle stays one file. */
const SENTRY_SOURCE = `"use strict";
const { parentPort, workerData } = require("node:worker_threads");
const vm = require("node:vm");
const fs = require("node:fs");
const { ctl, expression } = workerData;
const [STOP, VERDICT, SENT, PENDING, TERMINATE] = [${STOP}, ${VERDICT}, ${SENT}, ${PENDING}, ${TERMINATE}];
let session;
try {
  session = new (require("node:inspector").Session)();
  session.connectToMainThread();
} catch {
  session = undefined;
}
const stopping = () => Atomics.load(ctl, STOP) !== 0;

/** Runs fn under a SIGINT watchdog; true when SIGINT came meanwhile (fn is then cut short). */
function guarded(fn) {
  globalThis.__sentryCall = fn;
  try {
    vm.runInThisContext("__sentryCall()", { breakOnSigint: true });
    return false;
  } catch (err) {
    if (err && err.code === "ERR_SCRIPT_EXECUTION_INTERRUPTED") return true;
    throw err;
  }
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

function onSigint() {
  if (!session) return parentPort.postMessage("sigint");
  Atomics.store(ctl, VERDICT, PENDING);
  Atomics.store(ctl, SENT, 0);
  session.post("Runtime.evaluate", { expression });
  let signalled = false;
  for (;;) {
    const again = guarded(() => Atomics.wait(ctl, VERDICT, PENDING, 300));
    if (stopping()) return;
    const verdict = Atomics.load(ctl, VERDICT);
    if (verdict === TERMINATE) {
      session.post("Runtime.terminateExecution");
      Atomics.store(ctl, SENT, 1);
      Atomics.notify(ctl, SENT);
    }
    if (verdict !== PENDING) return;
    if (again || !signalled) signalChildren();
    signalled = true;
  }
}

let sigint = false;
let armed = false;
globalThis.__sentryLoop = () => {
  if (!armed) parentPort.postMessage("armed");
  armed = true;
  for (;;) {
    if (sigint) { sigint = false; onSigint(); }
    if (stopping()) return;
    sigint = guarded(() => Atomics.wait(ctl, STOP, 0));
    if (stopping()) return;
  }
};
for (;;) {
  try {
    vm.runInThisContext("__sentryLoop()", { breakOnSigint: true });
    break;
  } catch (err) {
    if (!err || err.code !== "ERR_SCRIPT_EXECUTION_INTERRUPTED") throw err;
    sigint = true;
  }
}
if (session) session.disconnect();
`;

/** Called on the main thread for each SIGINT; `busy`: JavaScript was running under it. */
export type SigintHandler = (busy: boolean) => void;

export interface Sentry {
  /** Ends the sentry (before the process exits, so no inspector session is left open). */
  stop(): Promise<void>;
}

/** Starts the sentry; resolves once SIGINT is caught (before that it would kill). */
export function startSentry(onSigint: SigintHandler): Promise<Sentry> {
  const ctl = new Int32Array(new SharedArrayBuffer(4 * Int32Array.BYTES_PER_ELEMENT));
  const clearAsyncIdStack = asyncIdStackClearer();
  const handler = () => {
    let busy = false;
    try {
      busy = runningUnder();
      // A callback cut short leaves its async id pushed; Node would abort on the mismatch.
      if (busy) clearAsyncIdStack();
      onSigint(busy);
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
  worker.unref();
  const exited = new Promise<void>((resolve) => worker.once("exit", () => resolve()));
  return new Promise<Sentry>((resolve, reject) => {
    worker.on("message", (message) => {
      if (message === "armed") resolve({ stop });
      else if (message === "sigint") onSigint(false);
    });
    worker.once("error", reject);
    worker.once("exit", (code) => reject(new Error(`the SIGINT sentry exited (${code})`)));
  });

  async function stop(): Promise<void> {
    Atomics.store(ctl, STOP, 1);
    Atomics.notify(ctl, STOP);
    Atomics.notify(ctl, VERDICT);
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
