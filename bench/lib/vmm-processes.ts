import { readdirSync, readFileSync } from "node:fs";

/** PSS (KiB) and CPU ticks of every QEMU whose command line names the server's run dir. */
export function vmmProcesses(runDir: string): { pid: number; pssKiB: number; ticks: number }[] {
  const found = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let cmdline = "";
    try {
      cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8");
    } catch {
      continue;
    }
    if (!cmdline.startsWith("qemu-system") || !cmdline.includes(runDir)) continue;
    const rollup = readFileSync(`/proc/${entry}/smaps_rollup`, "utf8");
    const pssKiB = Number(/^Pss:\s+(\d+)/m.exec(rollup)?.[1] ?? 0);
    const stat = readFileSync(`/proc/${entry}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
    const ticks = Number(stat[11]) + Number(stat[12]);
    found.push({ pid: Number(entry), pssKiB, ticks });
  }
  return found;
}

/** Page faults of one QEMU so far (its /proc stat): minor, and major (read from disk). */
export interface VmmFaults {
  readonly pid: number;
  /** Its command line (names its runtime dir, `<runDir>/<VM id>`). */
  readonly cmdline: string;
  readonly minor: number;
  readonly major: number;
}

/** Page faults of every QEMU whose command line names the server's run dir. */
export function vmmFaults(runDir: string): VmmFaults[] {
  const found: VmmFaults[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8");
      if (!cmdline.startsWith("qemu-system") || !cmdline.includes(runDir)) continue;
      // Fields after the command name: minflt is the 10th of stat, majflt the 12th.
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
      found.push({ pid: Number(entry), cmdline, minor: Number(stat[7]), major: Number(stat[9]) });
    } catch {
      // The process ended while we looked.
    }
  }
  return found;
}
