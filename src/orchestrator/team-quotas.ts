import type { SandboxRow, TeamLimits } from "../catalog/index.js";
import { checkQuota } from "../tenancy/index.js";
import { configOf } from "./live-sandbox.js";

/** A team's limits (undefined: none), from the team catalog. */
export type TeamLimitsLookup = (teamId: string) => Promise<TeamLimits | undefined>;

interface Running {
  sandboxes: number;
  vcpus: number;
  memoryMiB: number;
}

/**
 * Per-team admission, next to the node's own (`Capacity`): a create, a fork child and a
 * resume reserve their team's share synchronously, so concurrent requests of one team can
 * never pass its limits together. Disk counts running and paused sandboxes (`rows`), and is
 * checked when a sandbox is made, not when it resumes. Warren's own VMs (template builds)
 * are counted by the builds quota instead.
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

  /** What the team runs now on this node. */
  running(teamId: string): Readonly<Running> {
    return this.#running.get(teamId) ?? { sandboxes: 0, vcpus: 0, memoryMiB: 0 };
  }
}
