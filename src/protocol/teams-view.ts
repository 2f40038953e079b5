/**
 * What the teams API answers of a team (`GET /admin/teams`, `PATCH /admin/teams/{id}`), as
 * the server builds it and the CLI and the dashboard read it.
 */

/** A team's quotas: an absent field is no limit. */
export interface TeamLimitsView {
  readonly maxSandboxes?: number;
  readonly maxVcpus?: number;
  readonly maxMemoryMiB?: number;
  readonly maxDiskGiB?: number;
  readonly maxBuilds?: number;
  readonly maxUploadBytes?: number;
  readonly maxVolumeBytes?: number;
}

/** What the team holds on the node (running sandboxes, their vCPUs and memory; disk of running and paused). */
export interface TeamUsageView {
  readonly sandboxes: number;
  readonly vcpus: number;
  readonly memoryMiB: number;
  readonly diskMiB: number;
}

export interface TeamView {
  readonly teamID: string;
  readonly name: string;
  readonly createdAt: string;
  readonly limits: TeamLimitsView;
  readonly usage: TeamUsageView;
}
