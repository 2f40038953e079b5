import type { SandboxRow, TeamAdmit, TeamLimits } from "../../catalog/index.js";
import { checkQuota } from "../../tenancy/index.js";
import { configOf } from "./live-sandbox.js";

/** A team's limits (undefined: none), from the team catalog. */
export type TeamLimitsLookup = (teamId: string) => Promise<TeamLimits | undefined>;

interface Running {
  sandboxes: number;
  vcpus: number;
  memoryMiB: number;
}

/**
 * Per-team admission, next to the node's own (`Capacity`), in two steps. `reserve`: a
 * create, a fork child and a resume reserve their team's share on this node synchronously,
 * so that a team over its limits here takes nothing from the node or the pool. `admission`:
 * the write that makes the sandbox (its row) or resumes it is admitted by the catalog
 * against what the team holds on **every** node, under the team's lock there — so nodes,
 * gateways and concurrent requests never pass a limit together (one database, one count).
 * Disk counts running and paused sandboxes, and is checked when a sandbox is made, not when
 * it resumes. Warren's own VMs (template builds) are counted by the builds quota instead.
 */
export class TeamQuotas {
  readonly #running = new Map<string, Running>();

  constructor(
    readonly lookup: TeamLimitsLookup | undefined,
    /** The node's live rows (running and paused), for the disk a team holds. */
    readonly rows: () => Iterable<SandboxRow>,
  ) {}

  /** The team's limits; read before `reserve`, which must not wait. */
  async limitsOf(row: SandboxRow): Promise<TeamLimits> {
    if (!this.lookup || configOf(row).internal) return {};
    return (await this.lookup(row.teamId)) ?? {};
  }

  /** Reserves the row's share of its team (429 quota_exceeded when over); returns its release. */
  reserve(row: SandboxRow, limits: TeamLimits, options: { newDisk: boolean }): () => void {
    if (configOf(row).internal) return () => {};
    const used = this.#running.get(row.teamId) ?? { sandboxes: 0, vcpus: 0, memoryMiB: 0 };
    let diskMiB = 0;
    if (options.newDisk && limits.maxDiskGiB !== undefined) {
      for (const other of this.rows()) {
        if (other.teamId !== row.teamId || other.id === row.id || configOf(other).internal)
          continue;
        diskMiB += other.diskSizeMiB;
      }
    }
    checkQuota(
      row.teamId,
      limits,
      { ...used, diskMiB },
      {
        sandboxes: 1,
        vcpus: row.vcpus,
        memoryMiB: row.memoryMiB,
        diskMiB: options.newDisk ? row.diskSizeMiB : 0,
      },
    );
    used.sandboxes += 1;
    used.vcpus += row.vcpus;
    used.memoryMiB += row.memoryMiB;
    this.#running.set(row.teamId, used);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      used.sandboxes -= 1;
      used.vcpus -= row.vcpus;
      used.memoryMiB -= row.memoryMiB;
      if (used.sandboxes === 0) this.#running.delete(row.teamId);
    };
  }

  /**
   * The catalog's admission of the row's write (its insert, or the update that resumes it),
   * with the row's own share added to what the team's other sandboxes hold; undefined when
   * the team has no limit it would check.
   */
  admission(
    row: SandboxRow,
    limits: TeamLimits,
    options: { newDisk: boolean },
  ): TeamAdmit | undefined {
    if (configOf(row).internal) return undefined;
    const { maxSandboxes, maxVcpus, maxMemoryMiB, maxDiskGiB } = limits;
    const disk = options.newDisk && maxDiskGiB !== undefined;
    if (maxSandboxes === undefined && maxVcpus === undefined && maxMemoryMiB === undefined && !disk)
      return undefined;
    return (usage) =>
      checkQuota(row.teamId, limits, usage, {
        sandboxes: 1,
        vcpus: row.vcpus,
        memoryMiB: row.memoryMiB,
        diskMiB: options.newDisk ? row.diskSizeMiB : 0,
      });
  }

  /** What the team runs now on this node. */
  running(teamId: string): Readonly<Running> {
    return this.#running.get(teamId) ?? { sandboxes: 0, vcpus: 0, memoryMiB: 0 };
  }
}
