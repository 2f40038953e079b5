import { type ChildProcess, spawn } from "node:child_process";
import { readdirSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { setPriority } from "node:os";
import type { ExitInfo, VmNetwork } from "../driver.js";
import { VmmError } from "../errors.js";
import { spawnMergeable } from "./memory-merge.js";

export const QEMU_BINARY = "qemu-system-x86_64";

const STDERR_LIMIT = 8192;

/** One QEMU process: started inside the VM's network namespace, watched until it exits. */
export class QemuProcess {
  readonly child: ChildProcess;
  readonly exited: Promise<ExitInfo>;
  #stderr = "";
  #expectExit = false;

  constructor(
    readonly vmId: string,
    args: string[],
    network: VmNetwork,
    readonly consoleLog: string,
    /** `mergeable`: KSM may merge QEMU's memory with other processes' (see memory-merge.ts). */
    options: { mergeable?: boolean } = {},
  ) {
    // `ip netns exec` enters the namespace and execs QEMU in place: the pid is QEMU's.
    const [command, argv] =
      network.kind === "tap"
        ? ["ip", ["netns", "exec", network.netns, QEMU_BINARY, ...args]]
        : [QEMU_BINARY, args];
    const start = () => spawn(command, argv as string[], { stdio: ["ignore", "ignore", "pipe"] });
    this.child = options.mergeable ? spawnMergeable(start) : start();
    this.child.stderr?.setEncoding("utf8");
    this.child.stderr?.on("data", (chunk: string) => {
      this.#stderr = (this.#stderr + chunk).slice(-STDERR_LIMIT);
    });
    this.exited = new Promise<ExitInfo>((resolve) => {
      this.child.once("error", (err) => {
        resolve({
          code: null,
          signal: null,
          expected: false,
          reason: `cannot start ${command}: ${err.message}`,
        });
      });
      this.child.once("exit", async (code, signal) => {
        const expected = this.#expectExit;
        const reason = expected ? "stopped" : await this.#describeCrash(code, signal);
        resolve({ code, signal, expected, reason });
      });
    });
  }

  get pid(): number {
    if (this.child.pid === undefined) throw new VmmError("QEMU did not start", this.vmId);
    return this.child.pid;
  }

  /** Sets the scheduling priority (nice) of every thread QEMU has now; new ones inherit it. */
  setNice(nice: number): void {
    let tasks: string[];
    try {
      tasks = readdirSync(`/proc/${this.pid}/task`);
    } catch {
      return; // already gone
    }
    for (const tid of tasks) {
      try {
        setPriority(Number(tid), nice);
      } catch {
        // The thread ended meanwhile.
      }
    }
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  stderr(): string {
    return this.#stderr;
  }

  /** Marks the coming exit as ours (quit, kill), so it is not reported as a crash. */
  expectExit(): void {
    this.#expectExit = true;
  }

  async kill(): Promise<ExitInfo> {
    this.expectExit();
    if (this.running) this.child.kill("SIGKILL");
    return this.exited;
  }

  async #describeCrash(code: number | null, signal: NodeJS.Signals | null): Promise<string> {
    const console = await readFile(this.consoleLog, "utf8").catch(() => "");
    const tail = (text: string) => text.trim().split("\n").slice(-8).join("\n");
    return [
      `QEMU exited unexpectedly (${signal ? `signal ${signal}` : `code ${code}`})`,
      this.#stderr.trim() && `stderr:\n${tail(this.#stderr)}`,
      console.trim() && `console:\n${tail(console)}`,
    ]
      .filter(Boolean)
      .join("\n");
  }
}
