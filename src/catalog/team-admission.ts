import type { TeamAdmit, TeamUsage } from "./catalog.js";

/**
 * A team admission's refusal (a quota error), carried through a catalog's own error mapping
 * untouched: the caller gets the quota's message, not one about a failed write.
 */
export class AdmissionRefused extends Error {
  constructor(readonly refusal: unknown) {
    super("the team's quotas refused the write");
  }
}

/** Calls `admit` with the team's usage; what it throws comes out as AdmissionRefused. */
export function admitOrRefuse(admit: TeamAdmit, usage: TeamUsage): void {
  try {
    admit(usage);
  } catch (err) {
    throw new AdmissionRefused(err);
  }
}

/** The usage query's one row, as either database returns it (counts may come as strings). */
export interface UsageRecord {
  readonly sandboxes: number | string | null;
  readonly vcpus: number | string | null;
  readonly memory_mib: number | string | null;
  readonly disk_mib: number | string | null;
}

export function toTeamUsage(record: UsageRecord | undefined): TeamUsage {
  const n = (value: number | string | null | undefined) => Number(value ?? 0);
  return {
    sandboxes: n(record?.sandboxes),
    vcpus: n(record?.vcpus),
    memoryMiB: n(record?.memory_mib),
    diskMiB: n(record?.disk_mib),
  };
}
