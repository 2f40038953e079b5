import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import type { CommandRunner } from "./command.js";

const LISTS_DIR = "/var/lib/apt/lists";
/** Package lists older than this are refreshed before an install. */
export const APT_LISTS_MAX_AGE_MS = 7 * 24 * 3600 * 1000;

const ENV = { DEBIAN_FRONTEND: "noninteractive" };
/** Wait for a dpkg/apt run of someone else's instead of failing at once. */
const LOCK_WAIT = ["-o", "DPkg::Lock::Timeout=600"];

/** Age of the newest package list, or undefined when there is none (never updated). */
export async function aptListsAgeMs(listsDir = LISTS_DIR): Promise<number | undefined> {
  const names = await readdir(listsDir).catch(() => [] as string[]);
  let newest: number | undefined;
  for (const name of names.filter((n) => n.includes("_Packages"))) {
    const { mtimeMs } = await stat(join(listsDir, name));
    newest = Math.max(newest ?? 0, mtimeMs);
  }
  return newest === undefined ? undefined : Date.now() - newest;
}

/** The host's apt, as root: installs, downloads (never installs) and queries packages. */
export class Apt {
  readonly #runner: CommandRunner;
  #updated = false;

  constructor(runner: CommandRunner) {
    this.#runner = runner;
  }

  async update(): Promise<void> {
    await this.#runner.run("apt-get", ["-q", ...LOCK_WAIT, "update"], { env: ENV });
    this.#updated = true;
  }

  /** Runs `apt-get update` when the lists are missing or old; says whether it did. */
  async updateIfOld(): Promise<boolean> {
    if (this.#updated) return false;
    const age = await aptListsAgeMs();
    if (age !== undefined && age < APT_LISTS_MAX_AGE_MS) return false;
    await this.update();
    return true;
  }

  /** `release`: the suite to take them from (`-t`, e.g. a backports suite). */
  async install(packages: readonly string[], options: { release?: string } = {}): Promise<void> {
    await this.updateIfOld();
    const release = options.release ? ["-t", options.release] : [];
    const args = [
      "install",
      "-y",
      "-q",
      "--no-install-recommends",
      ...release,
      ...LOCK_WAIT,
      ...packages,
    ];
    const first = await this.#runner.run("apt-get", args, { env: ENV, allowFailure: true });
    if (first.code === 0) return;
    // Lists that name files the mirror no longer has: refresh once and retry.
    await this.update();
    await this.#runner.run("apt-get", args, { env: ENV });
  }

  /** Downloads `spec` (`name` or `name=version`) as a .deb into `dir`. */
  async download(spec: string, dir: string): Promise<void> {
    // As root, apt drops to _apt for downloads and warns when it cannot write `dir`; stay root.
    const args = ["download", "-q", "-o", "APT::Sandbox::User=root", spec];
    const first = await this.#runner.run("apt-get", args, {
      cwd: dir,
      env: ENV,
      allowFailure: true,
    });
    if (first.code === 0) return;
    await this.update();
    await this.#runner.run("apt-get", args, { cwd: dir, env: ENV });
  }

  /** The packages `name`'s candidate version depends on (first alternative of each). */
  async dependencies(name: string): Promise<string[]> {
    const { stdout } = await this.#runner.run("apt-cache", ["depends", name], { env: ENV });
    return parseAptCacheDepends(stdout);
  }
}

/** Parses `apt-cache depends` output into the names after "Depends:". */
export function parseAptCacheDepends(output: string): string[] {
  const out: string[] = [];
  for (const line of output.split("\n")) {
    const match = /^\s*\|?Depends:\s+(\S+)/.exec(line);
    if (match?.[1] && !match[1].startsWith("<")) out.push(match[1]);
  }
  return out;
}
