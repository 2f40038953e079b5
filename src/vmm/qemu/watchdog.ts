import { spawn } from "node:child_process";
import type { Socket } from "node:net";
import type { VmCgroups } from "./cgroups.js";
import { QEMU_BINARY, vmmEnv } from "./qemu-process.js";

/**
 * A process that outlives its parent (the keeper) by one moment: it blocks reading a pipe
 * only the parent holds, and when the parent is gone however it ended (kill -9 included)
 * the pipe closes and it kills every VMM in the VMs' cgroups. So no VM runs on unsupervised, with its egress
 * and no one to enforce its timeout (QEMU 10.0 has no exit-with-parent,
 * and PR_SET_PDEATHSIG does not survive QEMU dropping root). Without cgroups it kills the
 * QEMUs whose command line names `runDir` (as killOrphans does at the next start). It
 * ignores the terminal's signals (its own process group); `stop()` closes the pipe (and it
 * kills, as for any end of its parent), `disarm()` tells it to exit without killing (a
 * parent holding no VMM, whose VM cgroups may hold someone else's by then).
 */
export function startVmmWatchdog(
  cgroups: VmCgroups | undefined,
  runDir: string,
): { pid: number; stop(): void; disarm(): void; readonly exited: Promise<void> } {
  const byName = `pkill -KILL -f -- '^${QEMU_BINARY} .*${runDir.replace(/'/g, "")}/'`;
  const kill = cgroups?.killAllCommand() ?? byName;
  const script = `trap '' INT TERM HUP; while read -r line; do [ "$line" = disarm ] && exit 0; done; ${kill}`;
  const child = spawn("sh", ["-c", script], {
    stdio: ["pipe", "ignore", "ignore"],
    detached: true,
    env: vmmEnv(),
  });
  const exited = new Promise<void>((resolve) => {
    child.once("exit", () => resolve());
    child.once("error", () => resolve());
  });
  child.unref();
  // Never written: only its closing matters. Unreferenced so it never keeps Node running.
  const pipe = child.stdin as Socket;
  pipe.unref();
  return {
    pid: child.pid ?? 0,
    stop: () => pipe.end(),
    disarm: () => pipe.end("disarm\n"),
    exited,
  };
}
