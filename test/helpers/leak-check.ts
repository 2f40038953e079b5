import { existsSync } from "node:fs";
import { readdir, readFile, rmdir } from "node:fs/promises";
import { join } from "node:path";
import { runCommand } from "../../src/network/index.js";
import { runEnv } from "./run-env.js";

// What an e2e run may leave behind, by name: everything named under the run's network
// prefix `<p>` (see run-env.ts): slot namespaces `<p>-<n>` and the fixtures' `<p>-<what>`,
// host veths `<p>v<n>` and the fixtures' `<p><what>`, and host iptables rules commented
// `<p>:<n>` (or `<p>-<what>:<n>`, a test's second pool). Names of anyone else (a Warren
// server's `warren-<n>`, `wv<n>`, `warren:<n>`, another run's) are neither reported nor
// removed. Run prefixes all have the same length, so none is the start of another.

export interface Leftovers {
  netns: string[];
  links: string[];
  /** [table, iptables-save line] */
  rules: [string, string][];
  /** VM cgroups (`<hierarchy>/<prefix>-<what>/<vm>`); their parents are not leftovers. */
  cgroups: string[];
}

const CGROUP_ROOT = "/sys/fs/cgroup";

/**
 * Directories `<prefix>-<what>` the run's servers and drivers made in each cgroup hierarchy,
 * and `<prefix><x>-<what>` of a cluster test's node servers (their prefixes extend the run's).
 */
async function cgroupParents(prefix: string): Promise<string[]> {
  const roots = existsSync(join(CGROUP_ROOT, "cgroup.controllers"))
    ? [CGROUP_ROOT]
    : ["memory", "cpu", "pids"].map((c) => join(CGROUP_ROOT, c));
  const parents: string[] = [];
  for (const root of roots) {
    for (const name of await readdir(root).catch(() => [] as string[])) {
      if (new RegExp(`^${prefix}[a-z]?-`).test(name)) parents.push(join(root, name));
    }
  }
  return parents;
}

async function childGroups(parent: string): Promise<string[]> {
  const entries = await readdir(parent, { withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isDirectory()).map((e) => join(parent, e.name));
}

/** Everything named under `prefix` on the host: namespaces, links, host iptables rules. */
export async function findLeftovers(prefix: string): Promise<Leftovers> {
  const netns = (await readdir("/run/netns").catch(() => [])).filter((n) =>
    n.startsWith(`${prefix}-`),
  );
  const links = (await readdir("/sys/class/net")).filter((l) => l.startsWith(prefix));
  const comment = new RegExp(`--comment "?${prefix}[:-]`);
  const { stdout } = await runCommand("iptables-save", []);
  const rules: [string, string][] = [];
  let table = "";
  for (const line of stdout.split("\n")) {
    if (line.startsWith("*")) table = line.slice(1);
    if (line.startsWith("-A ") && comment.test(line)) rules.push([table, line]);
  }
  const cgroups: string[] = [];
  for (const parent of await cgroupParents(prefix)) cgroups.push(...(await childGroups(parent)));
  return { netns, links, rules, cgroups };
}

function describe(found: Leftovers): string[] {
  return [
    ...found.netns.map((n) => `netns ${n}`),
    ...found.links.map((l) => `link ${l}`),
    ...found.rules.map(([table, line]) => `iptables -t ${table} ${line}`),
    ...found.cgroups.map((c) => `cgroup ${c}`),
  ];
}

/** Lists every leftover of this run (or of `prefix`), one string each; [] when clean. */
export async function leakCheck(prefix = runEnv().networkPrefix): Promise<string[]> {
  return describe(await findLeftovers(prefix));
}

/**
 * Removes what this run (or the run of `prefix`) left: after an interrupted test, before
 * the next starts, and when a run ends. Returns what it removed.
 */
export async function removeLeftovers(prefix = runEnv().networkPrefix): Promise<string[]> {
  const found = await findLeftovers(prefix);
  const batch = [
    ...found.links.map((l) => `link del ${l}`),
    ...found.netns.map((n) => `netns del ${n}`),
  ];
  if (batch.length > 0) {
    await runCommand("ip", ["-force", "-batch", "-"], { input: `${batch.join("\n")}\n` }).catch(
      () => {},
    );
  }
  for (const [table, line] of found.rules) {
    await runCommand("iptables", ["-t", table, "-D", ...splitRule(line.slice(3))]).catch(() => {});
  }
  for (const parent of await cgroupParents(prefix)) {
    for (const group of await childGroups(parent)) {
      const pids = await readFile(join(group, "cgroup.procs"), "utf8").catch(() => "");
      for (const pid of pids.split("\n").filter(Boolean)) {
        try {
          process.kill(Number(pid), "SIGKILL");
        } catch {
          // Gone already.
        }
      }
      await removeGroup(group);
    }
    await removeGroup(parent);
  }
  return describe(found);
}

/** rmdir of a cgroup, once the processes just killed have left it. */
async function removeGroup(dir: string): Promise<void> {
  for (let attempt = 0; attempt < 50; attempt++) {
    try {
      await rmdir(dir);
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EBUSY") return;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

/** Splits an iptables-save rule into arguments (comments are the only quoted parts). */
function splitRule(text: string): string[] {
  return [...text.matchAll(/"([^"]*)"|(\S+)/g)].map((m) => m[1] ?? m[2] ?? "");
}

/**
 * QEMU processes with a path under `dir` on their command line (runtime dirs, sockets):
 * this run's VMMs when `dir` is the run's data dir, a server's when it is its `run/`.
 */
export async function qemuPidsIn(dir: string): Promise<number[]> {
  // The path starts an argument or follows "=", "," or ":" (path=…, file=…, unix:…): a
  // plain substring test would also take /srv/var/lib/warren/run/… for /var/lib/warren/run.
  const escaped = dir.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const pattern = new RegExp(`(^|[=,:])${escaped}/`);
  const pids: number[] = [];
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const args = (await readFile(`/proc/${entry}/cmdline`, "utf8").catch(() => "")).split("\0");
    if (args[0]?.includes("qemu-system") && args.some((arg) => pattern.test(arg))) {
      pids.push(Number(entry));
    }
  }
  return pids;
}

/** QEMU processes whose command line points into `runDir`, and entries left in it. */
export async function vmLeftovers(runDir: string): Promise<string[]> {
  const found = (await qemuPidsIn(runDir)).map((pid) => `qemu pid ${pid}`);
  for (const name of await readdir(runDir).catch(() => [] as string[])) {
    found.push(`runtime dir ${runDir}/${name}`);
  }
  return found;
}

/** The QEMU processes of VM `vmId` of the server whose runtime dirs are under `runDir`. */
export async function qemuPidsOfVm(runDir: string, vmId: string): Promise<number[]> {
  const dir = `${runDir}/${vmId}`.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const pattern = new RegExp(`(^|[=,:"])${dir}([/,"]|$)`);
  const pids: number[] = [];
  for (const pid of await qemuPidsIn(runDir)) {
    const args = (await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "")).split("\0");
    if (args.some((arg) => pattern.test(arg))) pids.push(pid);
  }
  return pids;
}
