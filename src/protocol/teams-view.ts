/**
 * What the teams API answers of a team (`GET /admin/teams`, `PATCH /admin/teams/{id}`), as
 * the server builds it and the CLI and the dashboard read it.
 */

/** A team's quotas (per-team ceilings): an absent one is no limit. Stored as is by the catalog. */
export interface TeamLimits {
  /** Sandboxes running at once (paused ones hold no CPU or memory and are not counted). */
  readonly maxSandboxes?: number;
  readonly maxVcpus?: number;
  readonly maxMemoryMiB?: number;
  /** Disk of the team's sandboxes, running and paused (a paused sandbox keeps its disk). */
  readonly maxDiskGiB?: number;
  /** Template builds building at once. */
  readonly maxBuilds?: number;
  /** Bytes of template build uploads kept for the team's templates. */
  readonly maxUploadBytes?: number;
  /** Disk bytes of all the team's volumes (whoever writes: content API or mounts). */
  readonly maxVolumeBytes?: number;
}

export const TEAM_LIMIT_KEYS = [
  "maxSandboxes",
  "maxVcpus",
  "maxMemoryMiB",
  "maxDiskGiB",
  "maxBuilds",
  "maxUploadBytes",
  "maxVolumeBytes",
] as const satisfies readonly (keyof TeamLimits)[];

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
  readonly limits: TeamLimits;
  readonly usage: TeamUsageView;
}
