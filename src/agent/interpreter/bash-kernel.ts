import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Writable } from "node:stream";
import { type EventSink, type ExecuteRequest, type Kernel, kernelExited } from "./kernel.js";

const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * A bash context: one `bash` process whose variables, functions and cwd persist. Each cell
 * is written to a file and sourced, then a marker with a per-kernel nonce and `$?` is printed
 * on both outputs: everything before the markers is the cell's output. SIGINT goes to the
 * process group; bash traps it and moves on, so the shell lives.
 */
export class BashKernel implements Kernel {
  readonly ready: Promise<void>;
  readonly #child: ChildProcess;
  readonly #dir = mkdtempSync(join(tmpdir(), ".warren-bash-"));
  readonly #marker = `__warren_${randomBytes(8).toString("hex")}_`;
  #running:
    | { sink: EventSink; open: Set<"stdout" | "stderr">; status?: number; done: () => void }
    | undefined;
  #count = 0;
  #exited = false;
  #globals: Readonly<Record<string, string>> = {};
  readonly #pending = { stdout: "", stderr: "" };

  constructor(options: { cwd: string; env: Readonly<Record<string, string>> }) {
    this.#child = spawn("/bin/bash", ["--noprofile", "--norc"], {
      cwd: options.cwd,
      env: { ...options.env },
      stdio: ["pipe", "pipe", "pipe"],
      detached: true,
    });
    this.#child.stdin?.on("error", () => {});
    (this.#child.stdin as Writable).write("trap : INT\n");
    for (const name of ["stdout", "stderr"] as const) {
      this.#child[name]?.on("data", (chunk: Buffer) => this.#output(name, chunk.toString("utf8")));
    }
    this.ready = new Promise<void>((resolve, reject) => {
      this.#child.once("spawn", resolve);
      this.#child.once("error", reject);
    });
    this.ready.catch(() => {});
    this.#child.once("exit", (code, signal) => this.#exit(signal ?? `status ${code}`));
  }

  execute(request: ExecuteRequest, sink: EventSink): Promise<void> {
    if (!request.silent) sink.emit({ type: "execution_count", count: ++this.#count });
    if (this.#exited) {
      sink.emit(exitedError("before this run"));
      return Promise.resolve();
    }
    const cell = join(this.#dir, "cell.sh");
    writeFileSync(cell, request.code);
    const script = [
      ...this.#globalsScript(request.globals),
      ...Object.entries(request.env).flatMap(([key, value], i) =>
        NAME.test(key)
          ? [
              `if [ -n "\${${key}+x}" ]; then __warren_had_${i}=1; __warren_old_${i}=$${key}; else __warren_had_${i}=; fi`,
              `export ${key}=${quoted(value)}`,
            ]
          : [],
      ),
      `. ${quoted(cell)}`,
      `__warren_status=$?`,
      ...Object.keys(request.env).flatMap((key, i) =>
        NAME.test(key)
          ? [
              `if [ -n "$__warren_had_${i}" ]; then export ${key}="$__warren_old_${i}"; else unset ${key}; fi`,
            ]
          : [],
      ),
      `printf '%s%d\\n' ${this.#marker} "$__warren_status"`,
      `printf '%s\\n' ${this.#marker} >&2`,
    ];
    return new Promise<void>((resolve) => {
      this.#running = { sink, open: new Set(["stdout", "stderr"]), done: resolve };
      (this.#child.stdin as Writable).write(`${script.join("\n")}\n`);
    });
  }

  get alive(): boolean {
    return !this.#exited;
  }

  interrupt(): void {
    if (this.#running && !this.#exited && this.#child.pid) {
      try {
        process.kill(-this.#child.pid, "SIGINT");
      } catch {
        // Gone: its exit ends the execution.
      }
    }
  }

  close(): void {
    if (!this.#exited && this.#child.pid) {
      try {
        process.kill(-this.#child.pid, "SIGKILL");
      } catch {
        // Gone already.
      }
    }
  }

  /** `globals` exported for good; those gone since the last cell unset. */
  #globalsScript(globals: Readonly<Record<string, string>>): string[] {
    const lines = Object.keys(this.#globals)
      .filter((key) => !(key in globals) && NAME.test(key))
      .map((key) => `unset ${key}`);
    for (const [key, value] of Object.entries(globals)) {
      if (NAME.test(key) && this.#globals[key] !== value)
        lines.push(`export ${key}=${quoted(value)}`);
    }
    this.#globals = { ...globals };
    return lines;
  }

  #output(name: "stdout" | "stderr", text: string): void {
    const running = this.#running;
    if (!running) return; // a background job's output between cells
    const buffered = this.#pending[name] + text;
    const at = buffered.indexOf(this.#marker);
    if (at === -1) {
      // Hold back what could be the start of a marker split across chunks.
      const keep = Math.min(buffered.length, this.#marker.length - 1);
      this.#pending[name] = buffered.slice(buffered.length - keep);
      this.#flush(name, buffered.slice(0, buffered.length - keep));
      return;
    }
    const end = buffered.indexOf("\n", at);
    this.#flush(name, buffered.slice(0, at));
    if (end === -1) {
      this.#pending[name] = buffered.slice(at); // the status is still to come
      return;
    }
    this.#pending[name] = "";
    if (name === "stdout")
      running.status = Number.parseInt(buffered.slice(at + this.#marker.length, end), 10);
    running.open.delete(name);
    if (running.open.size > 0) return;
    if (running.status !== undefined && running.status !== 0) {
      running.sink.emit({
        type: "error",
        name: "ExitCode",
        value: `exit status ${running.status}`,
        traceback: "",
      });
    }
    this.#running = undefined;
    running.done();
  }

  #flush(name: "stdout" | "stderr", text: string): void {
    if (text !== "") this.#running?.sink.emit({ type: name, text });
  }

  #exit(how: string): void {
    this.#exited = true;
    rmSync(this.#dir, { recursive: true, force: true });
    const running = this.#running;
    this.#running = undefined;
    if (running) {
      running.sink.emit(exitedError(how));
      running.done();
    }
  }
}

function exitedError(how: string) {
  return kernelExited(`the bash kernel exited (${how})`);
}

/** A single-quoted shell word. */
function quoted(value: string): string {
  return `'${value.replaceAll("'", `'\\''`)}'`;
}
