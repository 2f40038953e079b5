import { TEAM_LIMIT_KEYS, type TeamLimits, type TeamUsage } from "../catalog/index.js";
import { WarrenError } from "../shared/index.js";

/** A request's `limits` object: known keys only, each a whole number ≥ 0 (absent: unlimited). */
export function parseLimits(value: unknown, field = "limits"): TeamLimits {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new WarrenError("invalid_argument", `${field} must be an object`);
  }
  const limits: Record<string, number> = {};
  for (const [key, limit] of Object.entries(value)) {
    if (!(TEAM_LIMIT_KEYS as readonly string[]).includes(key)) {
      throw new WarrenError(
        "invalid_argument",
        `${field}/${key} is not a limit; the limits are ${TEAM_LIMIT_KEYS.join(", ")}`,
      );
    }
    if (limit === null) continue;
    if (!Number.isSafeInteger(limit) || (limit as number) < 0) {
      throw new WarrenError("invalid_argument", `${field}/${key} must be a whole number >= 0`);
    }
    limits[key] = limit as number;
  }
  return limits;
}

export type { TeamUsage };

/**
 * Throws 429 `quota_exceeded`, naming the first quota that `adding` would pass, when the team's
 * usage plus it is over a limit.
 */
export function checkQuota(
  teamId: string,
  limits: TeamLimits,
  usage: TeamUsage,
  adding: Partial<TeamUsage>,
): void {
  const over = (name: string, used: number, add: number, limit: number | undefined) => {
    if (limit === undefined || add <= 0 || used + add <= limit) return;
    throw new WarrenError(
      "quota_exceeded",
      `team ${teamId} is at its quota of ${name}: ${used} in use, ${add} more asked, limit ${limit}`,
    );
  };
  over("running sandboxes", usage.sandboxes, adding.sandboxes ?? 0, limits.maxSandboxes);
  over("vCPUs", usage.vcpus, adding.vcpus ?? 0, limits.maxVcpus);
  over("memory (MiB)", usage.memoryMiB, adding.memoryMiB ?? 0, limits.maxMemoryMiB);
  const diskLimit = limits.maxDiskGiB === undefined ? undefined : limits.maxDiskGiB * 1024;
  over("disk (MiB)", usage.diskMiB, adding.diskMiB ?? 0, diskLimit);
}
