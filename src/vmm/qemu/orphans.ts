import { readdir, readFile } from "node:fs/promises";

/**
 * Whether a process's command line (`/proc/<pid>/cmdline`, NUL-separated) is a QEMU whose
 * files are under `runDir`: a path of it starts an argument or follows "=", "," or ":"
 * (`path=…`, `file=…`, `unix:…`). A bare substring test would also take another server's
 * `/srv/var/lib/warren/run/…` for `/var/lib/warren/run/…`.
 */
export function isVmmUnder(cmdline: string, runDir: string): boolean {
  const [program = "", ...args] = cmdline.split("\0");
  if (!program.endsWith("qemu-system-x86_64")) return false;
  const escaped = runDir.replace(/\/+$/, "").replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const under = new RegExp(`(^|[=,:])${escaped}/`);
  return args.some((arg) => under.test(arg));
}

/**
 * Kills QEMU processes with files under any of `dirs` (runtime dirs, QMP sockets): VMMs an
 * earlier server left running (crash, kill -9), but those in `spare` (VMMs reattached).
 * Processes of any other Warren, or any other QEMU on the host, are never matched. Returns
 * how many were killed.
 */
export async function killOrphanVmms(
  dirs: readonly string[],
  spare: ReadonlySet<number> = new Set(),
): Promise<number> {
  let count = 0;
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry) || spare.has(Number(entry))) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, "utf8").catch(() => "");
    if (!dirs.some((dir) => isVmmUnder(cmdline, dir))) continue;
    try {
      process.kill(Number(entry), "SIGKILL");
      count += 1;
    } catch {
      // Already gone.
    }
  }
  return count;
}
