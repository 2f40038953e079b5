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
