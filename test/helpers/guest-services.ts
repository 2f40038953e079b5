// The guest services process of a server the tests started, seen from the host: which
// process it is, and who holds the listeners in that server's slot namespaces.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { runEnv } from "./run-env.js";

/** The guest services process: the child of `serverPid` running its bundle. */
export function servicesPid(serverPid: number | undefined): number {
  const found = readdirSync("/proc")
    .filter((entry) => /^\d+$/.test(entry))
    .filter((pid) => {
      try {
        const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
        const ppid = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ")[1];
        return cmdline.includes("guest-services/main.mjs") && ppid === String(serverPid);
      } catch {
        return false; // gone while listed
      }
    });
  assert.equal(found.length, 1, `one guest services process, found ${found.join(", ")}`);
  return Number(found[0]);
}

/**
 * The pids holding sockets bound to `port` in each of this run's slot namespaces (`ss -p`):
 * TCP listeners, or UDP sockets.
 */
export function slotListeners(port: number, protocol: "tcp" | "udp" = "tcp"): number[] {
  const prefix = `${runEnv().networkPrefix}-`;
  const namespaces = execFileSync("ip", ["netns", "list"], { encoding: "utf8" })
    .split("\n")
    .map((line) => line.split(" ")[0] ?? "")
    .filter((name) => name.startsWith(prefix));
  const flags = protocol === "tcp" ? "-ltnpH" : "-lunpH";
  return namespaces.flatMap((netns) => {
    const out = execFileSync("ip", ["netns", "exec", netns, "ss", flags, `sport = :${port}`], {
      encoding: "utf8",
    });
    return [...out.matchAll(/pid=(\d+)/g)].map((m) => Number(m[1]));
  });
}

/**
 * The QEMUs of these sandboxes, by pid: each names its runtime dir `.../run/<id>` (its
 * chroot, and for a booted VM its files there).
 */
export function vmmPids(sandboxIds: readonly string[]): number[] {
  const names = (id: string) => new RegExp(`/run/${id}(?:[/,\0]|$)`);
  const patterns = sandboxIds.map(names);
  return readdirSync("/proc")
    .filter((entry) => /^\d+$/.test(entry))
    .filter((pid) => {
      try {
        const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
        return cmdline.startsWith("qemu-system") && patterns.some((p) => p.test(cmdline));
      } catch {
        return false; // gone while listed
      }
    })
    .map(Number)
    .sort((a, b) => a - b);
}
