import { once } from "node:events";
import { readFile } from "node:fs/promises";
import { qemuPidsIn } from "./leak-check.js";
import type { TestServer } from "./server.js";

// What a crash-point harness needs around the server (src/shared/crash-point.ts): the points
// an operation passes, read from a WARREN_CRASH_TRACE file, how the server ended, and the
// QEMU processes a crashed server left.

/** One place to crash: the `pass`-th time the server passes `point` since it started. */
export interface CrashAt {
  readonly point: string;
  readonly pass: number;
}

/** `<point>:<pass>`, the value of WARREN_CRASH_AT. */
export function crashAtValue(at: CrashAt): string {
  return `${at.point}:${at.pass}`;
}

/** The points a trace file lists, in the order they were passed. */
export async function readTrace(file: string): Promise<string[]> {
  const text = await readFile(file, "utf8").catch(() => "");
  return text.split("\n").filter((line) => line !== "");
}

/**
 * The crash points of an operation: each point first passed at or after `from` (the
 * trace's length when the operation began) that `wanted` keeps, with its pass counted from
 * the server's start (setup passes some of the same points before).
 */
export function pointsOf(
  trace: readonly string[],
  from: number,
  wanted: (point: string) => boolean = () => true,
): CrashAt[] {
  const points: CrashAt[] = [];
  const seen = new Set<string>();
  trace.forEach((point, index) => {
    if (index < from || seen.has(point) || !wanted(point)) return;
    seen.add(point);
    points.push({ point, pass: trace.slice(0, index + 1).filter((p) => p === point).length });
  });
  return points;
}

/** How the server process ended, once it has. */
export async function exitOf(
  server: TestServer,
): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  const child = server.process;
  if (child.exitCode === null && child.signalCode === null) await once(child, "exit");
  return { code: child.exitCode, signal: child.signalCode };
}

/** Resolves true when the server exits within `ms`, false otherwise. */
export async function exitsWithin(server: TestServer, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  const exited = exitOf(server).then(() => true as const);
  try {
    return await Promise.race([exited, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** A process by pid and start time: a pid reused by a later process is not mistaken for it. */
export interface ProcessId {
  readonly pid: number;
  readonly startTime: string;
}

/** QEMU processes with files under `dir` (a server's data dir), identified for later checks. */
export async function vmmProcesses(dir: string): Promise<ProcessId[]> {
  const found: ProcessId[] = [];
  for (const pid of await qemuPidsIn(dir)) {
    const startTime = await startTimeOf(pid);
    if (startTime) found.push({ pid, startTime });
  }
  return found;
}

/** Those of `processes` still running (a zombie has ended: it only waits to be reaped). */
export async function stillRunning(processes: readonly ProcessId[]): Promise<ProcessId[]> {
  const running: ProcessId[] = [];
  for (const proc of processes) {
    if ((await startTimeOf(proc.pid)) === proc.startTime) running.push(proc);
  }
  return running;
}

/** Field 22 of /proc/<pid>/stat; undefined when the process is gone or a zombie. */
async function startTimeOf(pid: number): Promise<string | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => undefined);
  if (!stat) return undefined;
  // The command name (field 2) may hold spaces and parentheses: fields follow the last ")".
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  if (fields[0] === "Z" || fields[0] === "X") return undefined;
  return fields[19];
}

/** Unique processes of both lists. */
export function union(a: readonly ProcessId[], b: readonly ProcessId[]): ProcessId[] {
  const key = (p: ProcessId) => `${p.pid}:${p.startTime}`;
  return [...new Map([...a, ...b].map((p) => [key(p), p])).values()];
}
