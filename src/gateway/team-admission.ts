import type { ClusterCatalog, TeamCatalog } from "../catalog/index.js";
import { checkQuota } from "../tenancy/index.js";

/** The least a sandbox takes (E2B's smallest shape): the gateway does not know the template's. */
const LEAST = { vcpus: 1, memoryMiB: 128 } as const;

/**
 * A team's quotas across the cluster, before the gateway places a create or a fork: one
 * source of truth, the cluster catalog (every node's rows), plus what this gateway is
 * placing right now. A node admits against its own rows too, so a team is never over its
 * limits; near them, concurrent creates may be refused a moment early (a create being placed
 * may already show in the catalog), never admitted late.
 */
export class TeamAdmission {
  readonly #placing = new Map<string, number>();

  constructor(
    readonly cluster: Pick<ClusterCatalog, "teamUsage">,
    readonly teams: Pick<TeamCatalog, "getTeam">,
  ) {}

  /** Throws 429 quota_exceeded when `count` more sandboxes would pass the team's limits; else holds them until released. */
  async admit(teamId: string, count: number): Promise<() => void> {
    const limits = (await this.teams.getTeam(teamId))?.limits ?? {};
    const bounded =
      limits.maxSandboxes !== undefined ||
      limits.maxVcpus !== undefined ||
      limits.maxMemoryMiB !== undefined;
    if (!bounded) return () => {};
    // One aggregate of the team's rows: a list of the cluster's would grow with every team's.
    const usage = await this.cluster.teamUsage(teamId);
    const placing = this.#placing.get(teamId) ?? 0;
    checkQuota(
      teamId,
      limits,
      {
        sandboxes: usage.sandboxes + placing,
        vcpus: usage.vcpus + placing * LEAST.vcpus,
        memoryMiB: usage.memoryMiB + placing * LEAST.memoryMiB,
        // Disk is the nodes' to check: the gateway asks none of it.
        diskMiB: 0,
      },
      { sandboxes: count, vcpus: count * LEAST.vcpus, memoryMiB: count * LEAST.memoryMiB },
    );
    this.#placing.set(teamId, placing + count);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.#placing.get(teamId) ?? count) - count;
      if (left > 0) this.#placing.set(teamId, left);
      else this.#placing.delete(teamId);
    };
  }
}
