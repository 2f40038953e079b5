import { execFile } from "node:child_process";
import { WarrenError } from "../shared/index.js";

/** How long a team's measured usage is trusted before it is measured again. */
const REMEASURE_MS = 5_000;
/** A measure of all of a team's volumes that takes longer is given up (usage stays as was). */
const MEASURE_TIMEOUT_MS = 120_000;
/** What a new directory entry (file, directory, link) is counted as until measured. */
export const ENTRY_BYTES = 4096;

export interface VolumeQuotaOptions {
  /** The team's `maxVolumeBytes` (undefined: unlimited). */
  readonly limitOf: (teamId: string) => Promise<number | undefined>;
  /** The directories of the team's volumes. */
  readonly rootsOf: (teamId: string) => Promise<string[]>;
  /** Disk bytes used under some directories (default: `du`). */
  readonly measure?: (roots: readonly string[]) => Promise<number>;
  readonly remeasureMs?: number;
}

interface TeamUsage {
  limit: number | undefined;
  /** Bytes the last measure found. */
  measured: number;
  /** Bytes admitted since that measure began. */
  added: number;
  measuredAt: number;
  /** Which measure (VolumeQuota's count) the figure came from. */
  measure: number;
  measuring?: Promise<void>;
}

/**
 * A team's `maxVolumeBytes` across all its volumes, whoever writes (the content API, any
 * sandbox's NFS mount, on any node). Usage is measured (`du`: disk blocks, links not
 * followed, hard links once) every few seconds at most, and what is admitted in between is
 * added to it, so the quota is soft by at most what other nodes write within that time:
 * writes are refused (429 `quota_exceeded`, NFS's EDQUOT) once the team is over it, and
 * accepted again once removals bring it under.
 */
export class VolumeQuota {
  readonly #o: VolumeQuotaOptions;
  readonly #teams = new Map<string, TeamUsage>();
  /** Measures begun so far: each team's figure says which one it came from. */
  #measures = 0;

  constructor(options: VolumeQuotaOptions) {
    this.#o = options;
  }

  /** Throws quota_exceeded unless the team may add `bytes` now (measures first when stale). */
  async check(teamId: string, bytes: number): Promise<void> {
    const usage = this.#teams.get(teamId);
    if (!usage || this.#stale(usage)) {
      const asked = this.#measures;
      await this.#measure(teamId);
      // One already running began before this call: its figure may predate what was asked.
      if ((this.#teams.get(teamId)?.measure ?? 0) <= asked) await this.#measure(teamId);
    }
    if (!this.admit(teamId, bytes)) throw exceeded(teamId, this.#teams.get(teamId));
  }

  /**
   * Whether the team may add `bytes` now, counting them if so: synchronous, for the NFS
   * server's writes. A team not measured yet is admitted while its first measure runs.
   */
  admit(teamId: string, bytes: number): boolean {
    const usage = this.#teams.get(teamId);
    if (!usage || this.#stale(usage)) void this.#measure(teamId).catch(() => {});
    if (!usage || usage.limit === undefined) return true;
    if (bytes > 0 && usage.measured + usage.added + bytes > usage.limit) return false;
    usage.added += Math.max(bytes, 0);
    return true;
  }

  /** The team's bytes as last measured plus what was admitted since (0 if never measured). */
  used(teamId: string): number {
    const usage = this.#teams.get(teamId);
    return usage ? usage.measured + usage.added : 0;
  }

  #stale(usage: TeamUsage): boolean {
    return Date.now() - usage.measuredAt > (this.#o.remeasureMs ?? REMEASURE_MS);
  }

  #measure(teamId: string): Promise<void> {
    let usage = this.#teams.get(teamId);
    if (usage?.measuring) return usage.measuring;
    if (!usage) {
      usage = { limit: undefined, measured: 0, added: 0, measuredAt: 0, measure: 0 };
      this.#teams.set(teamId, usage);
    }
    const team = usage;
    const began = Date.now();
    const measure = ++this.#measures;
    const addedBefore = team.added;
    team.measuring = (async () => {
      const limit = await this.#o.limitOf(teamId);
      const roots = await this.#o.rootsOf(teamId);
      const measured = roots.length === 0 ? 0 : await (this.#o.measure ?? diskUsage)(roots);
      // What was admitted while du ran may or may not be in its figure: kept, to be safe.
      team.added -= addedBefore;
      team.measured = measured;
      team.limit = limit;
      team.measuredAt = began;
      team.measure = measure;
    })().finally(() => {
      team.measuring = undefined;
    });
    return team.measuring;
  }
}

function exceeded(teamId: string, usage: TeamUsage | undefined): WarrenError {
  const used = usage ? usage.measured + usage.added : 0;
  return new WarrenError(
    "quota_exceeded",
    `team ${teamId} is at its quota of volume bytes: ${used} in use, limit ${usage?.limit}; remove files from its volumes`,
  );
}

/** `du` of the directories, in bytes of disk (a directory gone meanwhile counts 0). */
export function diskUsage(roots: readonly string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    execFile(
      "du",
      ["-s", "-c", "-B1", "-P", "-x", "--", ...roots],
      { timeout: MEASURE_TIMEOUT_MS, maxBuffer: 1 << 20 },
      (err, stdout) => {
        const total = /^(\d+)\s+total$/m.exec(stdout);
        // du exits 1 when a file vanished during the walk: its total is still the figure.
        if (total) resolve(Number(total[1]));
        else reject(err ?? new Error(`du printed no total: ${stdout.slice(0, 200)}`));
      },
    );
  });
}
