import { spawn } from "node:child_process";
import type { Readable, Writable } from "node:stream";

/** The tail of a driver's own output kept to say why it died. */
export const DIAGNOSTIC_BYTES = 8 * 1024;

/**
 * A kernel driver's process as a DriverKernel sees it (kernels/PROTOCOL.md): where its
 * requests go, where its events come from, how it ended. Spawned (`spawnDriver`) or forked
 * from a zygote (`PythonZygote.fork`).
 */
export interface DriverProcess {
  readonly requests: Writable;
  readonly events: Readable;
  /** Settles once the process is gone, with how: "exited (status 1)", "could not start: …". */
  readonly ended: Promise<string>;
  /** The tail of its own output (an import error at start), to say why it died. */
  diagnostics(): string;
  /** Interrupts the running execution (PROTOCOL.md: SIGINT, or a request line). */
  interrupt(): void;
  kill(): void;
}

export interface DriverCommand {
  readonly command: string;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly env: Readonly<Record<string, string>>;
  /**
   * How an interrupt reaches it (PROTOCOL.md): SIGINT (R), or the request line
   * `{"type":"interrupt"}` on fd 0 (JavaScript: its busy main thread cannot take a signal).
   */
  readonly interruptBy: "SIGINT" | "request";
}

/** A driver started as envd's own child: requests on its fd 0, events on its fd 3. */
export function spawnDriver(command: DriverCommand): DriverProcess {
  const child = spawn(command.command, [...command.args], {
    cwd: command.cwd,
    env: { ...command.env },
    stdio: ["pipe", "pipe", "pipe", "pipe"],
  });
  const tail = new OutputTail();
  for (const output of [child.stdout, child.stderr]) output?.on("data", tail.add);
  // A driver that died leaves EPIPE on its stdin: reported through `ended`, not as a crash.
  child.stdin?.on("error", () => {});
  const ended = new Promise<string>((resolve) => {
    child.once("error", (err) => resolve(`could not start: ${err.message}`));
    child.once("exit", (code, signal) =>
      resolve(signal ? `exited (${signal})` : `exited (status ${code})`),
    );
  });
  const running = () => child.exitCode === null && child.signalCode === null;
  const requests = child.stdin as Writable;
  return {
    requests,
    events: child.stdio[3] as Readable,
    ended,
    diagnostics: () => tail.text,
    interrupt: () => {
      if (!running()) return;
      if (command.interruptBy === "SIGINT") child.kill("SIGINT");
      else requests.write(`${JSON.stringify({ type: "interrupt" })}\n`);
    },
    kill: () => {
      if (running()) child.kill("SIGKILL");
    },
  };
}

/** The last DIAGNOSTIC_BYTES of what a process wrote. */
export class OutputTail {
  text = "";

  readonly add = (chunk: Buffer): void => {
    this.text = (this.text + chunk.toString("utf8")).slice(-DIAGNOSTIC_BYTES);
  };
}
