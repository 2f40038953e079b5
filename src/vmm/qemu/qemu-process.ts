import { type ChildProcess, type StdioOptions, spawn } from "node:child_process";
import { closeSync } from "node:fs";
import type { ExitInfo } from "../driver.js";
import { VmmError } from "../errors.js";
import { TAP_FD } from "./args.js";
import { spawnMergeable } from "./memory-merge.js";
import { openTap } from "./tap-fd.js";
import type { SpawnVmm, VmmProcess, VmmSpawnRequest } from "./vmm-process.js";

export const QEMU_BINARY = "qemu-system-x86_64";

const STDERR_LIMIT = 8192;

/** Where QEMU and its helpers are found when the server was started without a PATH. */
const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/**
 * The whole environment of QEMU and of every helper the driver runs (the launcher, `unshare`,
 * `cp`, the watchdog): the server's own holds its secrets (database URL, API keys, cloud
 * credentials), and a VMM its guest took over can read its environment.
 */
export function vmmEnv(): NodeJS.ProcessEnv {
  return { PATH: process.env.PATH || DEFAULT_PATH };
}

/**
 * How the kernel's OOM killer ranks a VMM: well above the server (which lowers its own), so
 * when the host runs out of memory a VM is sacrificed, never the server that supervises them.
 */
export const VMM_OOM_SCORE_ADJ = 800;

/**
 * Runs before QEMU, in the process that becomes QEMU (each step execs the next, keeping the
 * pid): set the OOM score, join the VM's cgroups (so everything QEMU allocates, from its
 * first page, is charged to them), then exec the rest (`unshare --net … qemu`) with PATH
 * alone in its environment (the shell exports PWD of its own).
 * Arguments: <oom score> <cgroup.procs file>... -- <command...>.
 */
const LAUNCHER = `echo "$1" > /proc/self/oom_score_adj || exit 125
shift
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do echo $$ > "$1" || exit 125; shift; done
shift
unset PWD OLDPWD
exec "$@"`;

/** The server spawns each QEMU itself, as its child (the default `SpawnVmm`). */
export const spawnLocalVmm: SpawnVmm = async (request) => new QemuProcess(request);

export interface QemuProcessOptions {
  /**
   * A session and process group of its own (the keeper's QEMUs): no signal meant for its
   * parent's group (a terminal's Ctrl-C) reaches it.
   */
  readonly detached?: boolean;
  /**
   * Where the slot's namespace is found by name (default /run/netns): the keeper reaches the
   * server's through `/proc/<server pid>/root/run/netns`, the server's mount namespace being
   * a unit's of its own under systemd.
   */
  readonly netnsDir?: string;
}

/**
 * One QEMU process, the server's child: started in a network namespace of its own holding
 * the VM's tap open, watched until it exits. Its stdout is not read (the guest console is a
 * ring buffer in QEMU, drained over QMP: console.ts); its stderr's tail is kept.
 */
export class QemuProcess implements VmmProcess {
  readonly child: ChildProcess;
  readonly vmId: string;
  readonly exited: Promise<ExitInfo>;
  #stderr = "";
  #expectExit = false;

  constructor(request: VmmSpawnRequest, options: QemuProcessOptions = {}) {
    const { vmId, args, network } = request;
    this.vmId = vmId;
    // With a tap, QEMU gets it open (descriptor TAP_FD, opened in the slot's namespace) and
    // runs in a network namespace of its own with nothing in it, not even a loopback that
    // is up: taken over by its guest, it has the guest's NIC (policed like the guest) and
    // no network of its own. `unshare` execs QEMU in place: the pid is QEMU's.
    const tap =
      network.kind === "tap"
        ? openTap(network.netns, network.tap, vmId, options.netnsDir)
        : undefined;
    const qemu =
      tap === undefined ? [QEMU_BINARY, ...args] : ["unshare", "--net", "--", QEMU_BINARY, ...args];
    const argv = ["-c", LAUNCHER, "warren-vmm", String(VMM_OOM_SCORE_ADJ)];
    argv.push(...(request.cgroupProcs ?? []), "--", ...qemu);
    const stdio: StdioOptions = ["ignore", "ignore", "pipe"];
    if (tap !== undefined) stdio[TAP_FD] = tap;
    const detached = options.detached === true;
    const start = () => spawn("sh", argv, { stdio, env: vmmEnv(), cwd: "/", detached });
    try {
      this.child = request.mergeable ? spawnMergeable(start) : start();
    } finally {
      // The child has its own copy (or failed to start): the server keeps none.
      if (tap !== undefined) closeSync(tap);
    }
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
          reason: `cannot start QEMU: ${err.message}`,
        });
      });
      this.child.once("exit", (code, signal) => {
        const expected = this.#expectExit;
        const reason = expected ? "stopped" : crashReason(code, signal, this.#stderr);
        resolve({ code, signal, expected, reason });
      });
    });
  }

  get pid(): number {
    if (this.child.pid === undefined) throw new VmmError("QEMU did not start", this.vmId);
    return this.child.pid;
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
}

/** Why a QEMU that died on its own ended, with the end of its stderr. */
export function crashReason(
  code: number | null,
  signal: NodeJS.Signals | string | null,
  stderr: string,
): string {
  const tail = stderr.trim();
  return [
    `QEMU exited unexpectedly (${signal ? `signal ${signal}` : `code ${code}`})`,
    tail && `stderr:\n${lastLines(tail)}`,
  ]
    .filter(Boolean)
    .join("\n");
}

/** The last lines of a text, for an exit's reason. */
export function lastLines(text: string, count = 8): string {
  return text.trim().split("\n").slice(-count).join("\n");
}
