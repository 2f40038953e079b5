import * as pty from "node-pty";
import { AsyncQueue, WarrenError } from "../../shared/index.js";
import { VforkedChild } from "../native/spawn.js";
import type { UserAccount } from "../users.js";
import { type ExitStatus, exitStatus } from "./exit-status.js";

export type ProcessOutput =
  | { readonly kind: "stdout" | "stderr" | "pty"; readonly data: Uint8Array }
  | ({ readonly kind: "end" } & ExitStatus);

export interface ProcessSpec {
  readonly cmd: string;
  readonly args: readonly string[];
  /** The request's own envs, reported back by List. */
  readonly envs: Readonly<Record<string, string>>;
  /** The cwd as requested (reported by List); `workdir` is the resolved one. */
  readonly cwd: string | undefined;
  readonly workdir: string;
  readonly env: Readonly<Record<string, string>>;
  readonly user: UserAccount;
  readonly tag: string | undefined;
  readonly pty: { readonly cols: number; readonly rows: number } | undefined;
  readonly stdin: boolean;
}

/** After exit, stdout/stderr may still be held open by background children: wait this long. */
const OUTPUT_DRAIN_MS = 50;

/**
 * One process started through the agent, with or without a PTY. Output is fanned out to
 * every subscriber (Start's stream and any Connect streams); nothing is buffered for
 * subscribers that attach later, except the end event.
 */
export class ManagedProcess {
  readonly pid: number;
  readonly spec: ProcessSpec;
  #subscribers = new Set<AsyncQueue<ProcessOutput>>();
  #end: ProcessOutput | undefined;
  #child: VforkedChild | undefined;
  #terminal: pty.IPty | undefined;
  #endListeners: Array<() => void> = [];

  constructor(spec: ProcessSpec) {
    this.spec = spec;
    if (spec.pty) {
      this.#terminal = pty.spawn(spec.cmd, [...spec.args], {
        name: spec.env.TERM ?? "xterm-256color",
        cols: spec.pty.cols,
        rows: spec.pty.rows,
        cwd: spec.workdir,
        env: { ...spec.env },
        uid: spec.user.uid,
        gid: spec.user.gid,
      });
      this.pid = this.#terminal.pid;
      this.#terminal.onData((data) => this.#emit({ kind: "pty", data: Buffer.from(data, "utf8") }));
      this.#terminal.onExit(({ exitCode, signal }) =>
        this.#finish(exitStatus(exitCode, signal ?? null)),
      );
      return;
    }
    let child: VforkedChild;
    try {
      child = new VforkedChild(spec.cmd, spec.args, {
        cwd: spec.workdir,
        env: spec.env,
        uid: spec.user.uid,
        gid: spec.user.gid,
        stdin: spec.stdin,
      });
    } catch (err) {
      const reason = (err as NodeJS.ErrnoException).code ?? String(err);
      throw new WarrenError("invalid_argument", `failed to start '${spec.cmd}': ${reason}`);
    }
    this.pid = child.pid;
    this.#child = child;
    child.stdin?.on("error", () => {}); // writes after the process exited
    child.stdout.on("data", (data: Buffer) => this.#emit({ kind: "stdout", data }));
    child.stderr.on("data", (data: Buffer) => this.#emit({ kind: "stderr", data }));
    child.on("exit", (code, signal) => {
      const status = exitStatus(code, signal);
      const timer = setTimeout(() => {
        child.stdout.destroy();
        child.stderr.destroy();
        this.#finish(status);
      }, OUTPUT_DRAIN_MS);
      child.on("close", () => {
        clearTimeout(timer);
        this.#finish(status);
      });
    });
  }

  get ended(): boolean {
    return this.#end !== undefined;
  }

  /** How it ended, in envd's words (`exit status 1`, `signal: killed`); undefined while it runs. */
  get endStatus(): string | undefined {
    return this.#end?.kind === "end" ? this.#end.status : undefined;
  }

  get isPty(): boolean {
    return this.#terminal !== undefined;
  }

  /** A stream of this process's output from now on; ends with the end event. */
  subscribe(): AsyncQueue<ProcessOutput> {
    const queue = new AsyncQueue<ProcessOutput>();
    if (this.#end) {
      queue.push(this.#end);
      queue.close();
    } else {
      this.#subscribers.add(queue);
    }
    return queue;
  }

  unsubscribe(queue: AsyncQueue<ProcessOutput>): void {
    this.#subscribers.delete(queue);
  }

  onEnd(listener: () => void): void {
    if (this.#end) listener();
    else this.#endListeners.push(listener);
  }

  writeStdin(data: Uint8Array): void {
    if (this.#terminal)
      throw new WarrenError("invalid_argument", "process has a PTY: send PTY input");
    const stdin = this.#child?.stdin;
    if (!stdin) throw new WarrenError("conflict", "stdin is not enabled for this process");
    if (stdin.destroyed || stdin.writableEnded)
      throw new WarrenError("conflict", "stdin is closed");
    stdin.write(data);
  }

  writePty(data: Uint8Array): void {
    if (!this.#terminal)
      throw new WarrenError("invalid_argument", "process has no PTY: send stdin");
    this.#terminal.write(Buffer.from(data).toString("utf8"));
  }

  closeStdin(): void {
    if (this.#terminal)
      throw new WarrenError("invalid_argument", "cannot close stdin of a PTY process");
    this.#child?.stdin?.end();
  }

  resize(cols: number, rows: number): void {
    if (!this.#terminal) throw new WarrenError("invalid_argument", "process has no PTY to resize");
    if (cols < 1 || rows < 1)
      throw new WarrenError("invalid_argument", "PTY size must be at least 1x1");
    this.#terminal.resize(cols, rows);
  }

  signal(signal: NodeJS.Signals): void {
    if (this.#end) return;
    try {
      process.kill(this.pid, signal);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ESRCH") throw err;
    }
  }

  #emit(output: ProcessOutput): void {
    for (const queue of this.#subscribers) queue.push(output);
  }

  #finish(status: ExitStatus): void {
    if (this.#end) return;
    this.#end = { kind: "end", ...status };
    this.#emit(this.#end);
    for (const queue of this.#subscribers) queue.close();
    this.#subscribers.clear();
    for (const listener of this.#endListeners.splice(0)) listener();
  }
}
