import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, rmdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { VmmError } from "../errors.js";

const ROOT = "/sys/fs/cgroup";
const V1_CONTROLLERS = ["memory", "cpu", "pids"] as const;

/** What one VM may use; from its shape (see limitsFor). */
export interface VmLimits {
  readonly memoryBytes: number;
  /** CPU time per period, µs: vCPUs × period plus a share for QEMU's own threads. */
  readonly cpuQuotaUs: number;
  readonly cpuPeriodUs: number;
  readonly pids: number;
}

/** Room for QEMU itself beside guest RAM: its code, device state, TCG's code cache. */
const VMM_OVERHEAD_MIB = 256;
const CPU_PERIOD_US = 100_000;
/** QEMU's threads: vCPUs, main loop, RCU, I/O workers (its pool grows to 64). */
const VMM_PIDS = 128;

export function limitsFor(shape: { vcpus: number; memoryMiB: number }, tcgCacheMiB = 64): VmLimits {
  return {
    memoryBytes: (shape.memoryMiB + VMM_OVERHEAD_MIB + tcgCacheMiB) * 1024 * 1024,
    cpuQuotaUs: shape.vcpus * CPU_PERIOD_US + CPU_PERIOD_US / 2,
    cpuPeriodUs: CPU_PERIOD_US,
    pids: VMM_PIDS,
  };
}

export interface VmCgroup {
  /** The `cgroup.procs` files the VMM joins (one per v1 hierarchy; one under v2). */
  readonly procs: readonly string[];
  /** Removes the cgroup once its processes are gone. */
  remove(): Promise<void>;
}

/**
 * The cgroups of one server's VMs: `<name>` under the cgroup root (v2), or under the memory,
 * cpu and pids hierarchies (v1, as on hosts that still mount them), one child per VM with
 * `memory.max`, `cpu.max`, `pids.max` (or their v1 names) from its shape.
 */
export class VmCgroups {
  private constructor(
    readonly version: 1 | 2,
    /** The server's parent groups: one under v2, one per controller under v1. */
    readonly parents: readonly string[],
  ) {}

  /** Finds the host's cgroup layout; undefined when it has none Warren can use. */
  static detect(name: string): VmCgroups | undefined {
    if (!/^[A-Za-z0-9._-]+$/.test(name)) throw new VmmError(`bad cgroup name ${name}`);
    if (existsSync(join(ROOT, "cgroup.controllers"))) return new VmCgroups(2, [join(ROOT, name)]);
    if (V1_CONTROLLERS.every((c) => existsSync(join(ROOT, c, "cgroup.procs"))))
      return new VmCgroups(
        1,
        V1_CONTROLLERS.map((c) => join(ROOT, c, name)),
      );
    return undefined;
  }

  async create(vmId: string, limits: VmLimits): Promise<VmCgroup> {
    const dirs = this.parents.map((parent) => join(parent, vmId));
    try {
      if (this.version === 2) {
        const [dir] = dirs as [string];
        await mkdir(this.parents[0] as string, { recursive: true });
        await enableControllers(ROOT);
        await enableControllers(this.parents[0] as string);
        await mkdir(dir);
        await writeFile(join(dir, "memory.max"), String(limits.memoryBytes));
        await writeFile(join(dir, "memory.swap.max"), "0").catch(() => {});
        await writeFile(join(dir, "cpu.max"), `${limits.cpuQuotaUs} ${limits.cpuPeriodUs}`);
        await writeFile(join(dir, "pids.max"), String(limits.pids));
      } else {
        const [memory, cpu, pids] = dirs as [string, string, string];
        for (const dir of dirs) await mkdir(dir, { recursive: true });
        await writeFile(join(memory, "memory.limit_in_bytes"), String(limits.memoryBytes));
        await writeFile(join(cpu, "cpu.cfs_period_us"), String(limits.cpuPeriodUs));
        await writeFile(join(cpu, "cpu.cfs_quota_us"), String(limits.cpuQuotaUs));
        await writeFile(join(pids, "pids.max"), String(limits.pids));
      }
    } catch (err) {
      await removeDirs(dirs);
      throw new VmmError(
        `cannot set up the cgroup of VM ${vmId}: ${(err as Error).message}`,
        vmId,
        {
          cause: err,
        },
      );
    }
    return { procs: dirs.map((d) => join(d, "cgroup.procs")), remove: () => removeDirs(dirs) };
  }

  /**
   * The cgroup of a VM that is still running, made by an earlier server (reattach): found,
   * never made, and refused unless `pid` is in it in every hierarchy.
   */
  async existing(vmId: string, pid: number): Promise<VmCgroup> {
    const dirs = this.parents.map((parent) => join(parent, vmId));
    const procs = dirs.map((d) => join(d, "cgroup.procs"));
    for (const file of procs) {
      if (!(await pidsIn(file)).includes(pid))
        throw new VmmError(`VMM pid ${pid} is not in the cgroup ${dirname(file)}`, vmId);
    }
    return { procs, remove: () => removeDirs(dirs) };
  }

  /** Removes the group of VM `vmId` in every hierarchy, once its processes are gone. */
  remove(vmId: string): Promise<void> {
    return removeDirs(this.parents.map((parent) => join(parent, vmId)));
  }

  /**
   * The VM cgroups that exist now (by VM id), in any hierarchy: a server that died between
   * the rmdirs of one VM's v1 groups left it in some of them only.
   */
  async list(): Promise<string[]> {
    const ids = new Set<string>();
    for (const parent of this.parents) {
      const entries = await readdir(parent, { withFileTypes: true }).catch(() => []);
      for (const entry of entries) if (entry.isDirectory()) ids.add(entry.name);
    }
    return [...ids];
  }

  /**
   * Kills every process left in this server's VM cgroups (an earlier run's, after a crash)
   * and removes the groups; returns how many processes it killed. The groups of the VMs in
   * `keep` (VMMs still held) are left alone.
   */
  async sweep(keep: ReadonlySet<string> = new Set()): Promise<number> {
    let killed = 0;
    for (const vmId of await this.list()) {
      if (keep.has(vmId)) continue;
      const dirs = this.parents.map((parent) => join(parent, vmId));
      const pids = new Set(
        (await Promise.all(dirs.map((d) => pidsIn(join(d, "cgroup.procs"))))).flat(),
      );
      for (const pid of pids) {
        try {
          process.kill(pid, "SIGKILL");
          killed += 1;
        } catch {
          // Gone already.
        }
      }
      await removeDirs(dirs);
    }
    return killed;
  }

  /** A shell command that kills every process in this server's VM cgroups. */
  killAllCommand(): string {
    const procs = `'${this.parents[0]}'/*/cgroup.procs`;
    return `for f in ${procs}; do for p in $(cat "$f" 2>/dev/null); do kill -9 "$p"; done; done`;
  }
}

async function enableControllers(dir: string): Promise<void> {
  const control = join(dir, "cgroup.subtree_control");
  const enabled = (await readFile(control, "utf8")).split(/\s+/);
  const wanted = ["memory", "cpu", "pids"].filter((c) => !enabled.includes(c));
  if (wanted.length > 0) await writeFile(control, wanted.map((c) => `+${c}`).join(" "));
}

async function pidsIn(procs: string): Promise<number[]> {
  const text = await readFile(procs, "utf8").catch(() => "");
  return text.split("\n").filter(Boolean).map(Number);
}

/** How long an exiting VMM may take to leave its group: tearing down its memory under load. */
const EXIT_TEARDOWN_MS = 30_000;

/**
 * rmdir of each group, waiting for exiting processes to leave it: a VMM's exit is reported
 * before the kernel has taken its last thread out of the group. 2 s was not always enough on
 * a loaded host (a crash-point run under load found a group left behind until the next start).
 */
async function removeDirs(dirs: readonly string[]): Promise<void> {
  const deadline = Date.now() + EXIT_TEARDOWN_MS;
  for (const dir of dirs) {
    for (let delayMs = 10; ; delayMs = Math.min(delayMs * 2, 500)) {
      try {
        await rmdir(dir);
        break;
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === "ENOENT") break;
        if (code !== "EBUSY" || Date.now() >= deadline) throw err;
        await new Promise((resolve) => setTimeout(resolve, delayMs));
      }
    }
  }
}
