import { readdirSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { setPriority } from "node:os";
import type { ExitInfo, VmNetwork } from "../driver.js";

/**
 * A running QEMU, however it was started: spawned by this server (`QemuProcess`), or, later,
 * held by a keeper process that outlives the server. The driver talks to the VMM itself over
 * QMP and /proc; this is only what the process's parent knows.
 */
export interface VmmProcess {
  readonly vmId: string;
  readonly pid: number;
  /** Settles once the process has exited, however it ended; never rejects. */
  readonly exited: Promise<ExitInfo>;
  readonly running: boolean;
  /** The end of what QEMU wrote on its stderr (bounded): why it would not start or died. */
  stderr(): string;
  /** Marks the coming exit as ours (quit, kill), so it is not reported as a crash. */
  expectExit(): void;
  /** SIGKILL (an exit we expect); settles once it exited. */
  kill(): Promise<ExitInfo>;
}

/** What starting one QEMU takes: its arguments and what its launcher sets up first. */
export interface VmmSpawnRequest {
  readonly vmId: string;
  readonly args: readonly string[];
  /** A tap is opened in the slot's namespace and handed over (see qemu-process.ts). */
  readonly network: VmNetwork;
  /** KSM may merge QEMU's memory with other processes' (see memory-merge.ts). */
  readonly mergeable?: boolean;
  /** `cgroup.procs` files QEMU joins before it starts. */
  readonly cgroupProcs?: readonly string[];
}

/** Starts a QEMU: here, the server spawns it; a keeper client would ask the keeper to. */
export type SpawnVmm = (request: VmmSpawnRequest) => Promise<VmmProcess>;

/** Sets the scheduling priority (nice) of every thread `pid` has now; new ones inherit it. */
export function setNice(pid: number, nice: number): void {
  let tasks: string[];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
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

/**
 * The fields of /proc/<pid>/stat after the command name (field 3 first), or undefined when
 * there is no such process. The name (field 2) may hold spaces and parentheses: the fields
 * are counted from its last ")".
 */
async function statFields(pid: number): Promise<string[] | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => undefined);
  return stat?.slice(stat.lastIndexOf(")") + 2).split(" ");
}

/**
 * When `pid` started (clock ticks after boot, /proc/<pid>/stat field 22): with the pid, it
 * names one process for good, since a pid is reused only by a process started later.
 * Undefined when there is no such process.
 */
export async function processStartTime(pid: number): Promise<number | undefined> {
  const ticks = Number((await statFields(pid))?.[19]);
  return Number.isSafeInteger(ticks) ? ticks : undefined;
}

/** Clock ticks per second of /proc's CPU times (USER_HZ: 100 on every Linux Warren runs on). */
const USER_HZ = 100;

/** CPU time `pid` has used so far, all its threads, user and system, ms; undefined when gone. */
export async function processCpuMs(pid: number): Promise<number | undefined> {
  const fields = await statFields(pid);
  const ticks = Number(fields?.[11]) + Number(fields?.[12]); // utime, stime: fields 14 and 15
  return Number.isSafeInteger(ticks) ? (ticks * 1000) / USER_HZ : undefined;
}

/** The real, effective, saved and filesystem uids of `pid`; undefined when it is gone. */
export async function processUids(pid: number): Promise<number[] | undefined> {
  const status = await readFile(`/proc/${pid}/status`, "utf8").catch(() => undefined);
  const line = status === undefined ? undefined : /^Uid:\s+(.*)$/m.exec(status)?.[1];
  return line?.trim().split(/\s+/).map(Number);
}
