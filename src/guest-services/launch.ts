import { type ChildProcess, spawn } from "node:child_process";
import { appendFile, readlink, writeFile } from "node:fs/promises";
import { setTimeout as sleep } from "node:timers/promises";

/** How the guest services process is started, and as whom. */
export interface ServicesLaunch {
  /** The process's entry point (dist/guest-services/main.mjs). */
  readonly entry: string;
  /** Node's own flags before the entry (tests run the TypeScript entry: `--import tsx`). */
  readonly nodeArgs?: readonly string[];
  /**
   * Host ids its user namespace maps its own 0-65535 to (WARREN_GUEST_ID_BASE): it runs as
   * that namespace's root, whose capabilities reach what those ids own and nothing of the
   * host's. Root only. Unset: it runs as this process (development, tests without root).
   */
  readonly idBase?: number;
  /** `cgroup.procs` files it joins before it runs its first line (its memory bound). */
  readonly cgroupProcs?: readonly string[];
  /** Its whole environment: never the server's (database URL, keys, cloud credentials). */
  readonly env: Readonly<Record<string, string>>;
}

/** Ids a user namespace of the services maps. */
export const MAPPED_IDS = 65_536;
/** How long the launcher may take to enter its user namespace. */
const UNSHARE_TIMEOUT_MS = 5_000;

/**
 * Starts the process; resolves once it runs Node as its own user (the namespace's ids mapped,
 * in its cgroup), with its IPC channel open. A launch that fails half-way is killed.
 */
export async function launchServices(launch: ServicesLaunch): Promise<ChildProcess> {
  const { idBase } = launch;
  const options = { env: { ...launch.env }, cwd: "/" };
  if (idBase === undefined) {
    const child = spawn(process.execPath, [...(launch.nodeArgs ?? []), launch.entry], {
      ...options,
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    await joinCgroups(child, launch.cgroupProcs);
    return child;
  }
  // setpriv drops to the range's first id before the namespace is made (so the process holds
  // nothing of host root's: not its files, not its groups); the shell waits until the maps
  // are written, then execs Node as the namespace's root.
  const child = spawn(
    "setpriv",
    [
      `--reuid=${idBase}`,
      `--regid=${idBase}`,
      "--clear-groups",
      "--",
      "unshare",
      "--user",
      "--",
      "sh",
      "-c",
      'read _ && exec "$@"',
      "guest-services",
      process.execPath,
      ...(launch.nodeArgs ?? []),
      launch.entry,
    ],
    { ...options, stdio: ["pipe", "inherit", "inherit", "ipc"] },
  );
  try {
    await joinCgroups(child, launch.cgroupProcs);
    await userNamespaceOf(child);
    const map = `0 ${idBase} ${MAPPED_IDS}\n`;
    await writeFile(`/proc/${child.pid}/uid_map`, map);
    await writeFile(`/proc/${child.pid}/gid_map`, map);
    child.stdin?.end("go\n");
  } catch (err) {
    child.kill("SIGKILL");
    throw err;
  }
  return child;
}

async function joinCgroups(child: ChildProcess, procs: readonly string[] = []): Promise<void> {
  try {
    for (const file of procs) await appendFile(file, `${child.pid}\n`);
  } catch (err) {
    child.kill("SIGKILL");
    throw err;
  }
}

/** Waits until the launcher has entered a user namespace of its own. */
async function userNamespaceOf(child: ChildProcess): Promise<void> {
  const own = await readlink("/proc/self/ns/user");
  const deadline = Date.now() + UNSHARE_TIMEOUT_MS;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`the guest services launcher exited (${child.exitCode ?? child.signalCode})`);
    }
    const current = await readlink(`/proc/${child.pid}/ns/user`).catch(() => own);
    if (current !== own) return;
    if (Date.now() > deadline)
      throw new Error("the guest services launcher made no user namespace");
    await sleep(5);
  }
}
