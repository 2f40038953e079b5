import { readdir, readFile } from "node:fs/promises";

/**
 * Kills QEMU processes whose command line points into `runDir`: VMMs an earlier server left
 * running under its runtime directories (crash, kill -9). Processes of any other Warren (or
 * any other QEMU on the host) are never matched. Returns how many were killed.
 */
export async function killOrphanVmms(runDir: string): Promise<number> {
  let count = 0;
  const prefix = `${runDir.replace(/\/+$/, "")}/`;
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, "utf8").catch(() => "");
    const [program = "", ...args] = cmdline.split("\0");
    if (!program.endsWith("qemu-system-x86_64")) continue;
    if (!args.some((arg) => arg.includes(prefix))) continue;
    try {
      process.kill(Number(entry), "SIGKILL");
      count += 1;
    } catch {
      // Already gone.
    }
  }
  return count;
}
