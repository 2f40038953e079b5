// CPU time and memory of the processes a bench started, read from /proc: which of the
// gateway, the nodes, PostgreSQL and the bench's own clients spent the machine's cores.
import { readdirSync, readFileSync } from "node:fs";

/** Clock ticks per second of /proc/<pid>/stat's times (USER_HZ: 100 on Linux). */
const TICKS_PER_SECOND = 100;

export interface ProcessSample {
  /** User + system CPU time so far, ms. */
  readonly cpuMs: number;
  /** Resident set now and at its peak, MiB. */
  readonly rssMiB: number;
  readonly peakRssMiB: number;
}

/** The pid's parent and command name, or undefined once it is gone. */
function statOf(pid: number): { ppid: number; comm: string; cpuMs: number } | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // The command name is in parentheses and may hold spaces: fields count from after it.
  const close = text.lastIndexOf(")");
  const comm = text.slice(text.indexOf("(") + 1, close);
  const fields = text.slice(close + 2).split(" ");
  const ticks = Number(fields[11]) + Number(fields[12]);
  return { ppid: Number(fields[1]), comm, cpuMs: (ticks * 1000) / TICKS_PER_SECOND };
}

function statusKiB(pid: number, field: string): number {
  try {
    const text = readFileSync(`/proc/${pid}/status`, "utf8");
    const line = text.split("\n").find((l) => l.startsWith(`${field}:`));
    return Number(line?.split(/\s+/)[1] ?? 0);
  } catch {
    return 0;
  }
}

export function sampleProcess(pid: number): ProcessSample {
  return {
    cpuMs: statOf(pid)?.cpuMs ?? 0,
    rssMiB: Math.round(statusKiB(pid, "VmRSS") / 1024),
    peakRssMiB: Math.round(statusKiB(pid, "VmHWM") / 1024),
  };
}

/** Every live descendant of `root` (children, theirs, ...), with its command name. */
export function descendants(root: number): { pid: number; comm: string }[] {
  const children = new Map<number, { pid: number; comm: string }[]>();
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry);
    if (!Number.isInteger(pid)) continue;
    const stat = statOf(pid);
    if (!stat) continue;
    const list = children.get(stat.ppid) ?? [];
    list.push({ pid, comm: stat.comm });
    children.set(stat.ppid, list);
  }
  const found: { pid: number; comm: string }[] = [];
  const walk = (pid: number) => {
    for (const child of children.get(pid) ?? []) {
      found.push(child);
      walk(child.pid);
    }
  };
  walk(root);
  return found;
}

/** CPU time so far of a set of processes, ms (those gone since count nothing). */
export function cpuMsOf(pids: readonly number[]): number {
  return pids.reduce((sum, pid) => sum + (statOf(pid)?.cpuMs ?? 0), 0);
}
