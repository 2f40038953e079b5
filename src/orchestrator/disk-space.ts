import { statfsSync } from "node:fs";
import { dirname } from "node:path";
import { WarrenError } from "../shared/index.js";

/** A filesystem's size and what an unprivileged writer may still use of it, in bytes. */
export interface DiskStats {
  readonly totalBytes: number;
  readonly freeBytes: number;
}

export type StatDisk = (dir: string) => DiskStats;

const MiB = 1024 * 1024;

/** statfs(2) of `dir` (or of its nearest existing parent: the dir may not be made yet). */
export function statDisk(dir: string): DiskStats {
  for (let path = dir; ; path = dirname(path)) {
    try {
      const fs = statfsSync(path);
      // bavail, not bfree: the blocks root keeps for itself are the host's, not Warren's.
      return { totalBytes: fs.blocks * fs.bsize, freeBytes: fs.bavail * fs.bsize };
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== "ENOENT" || dirname(path) === path) throw err;
    }
  }
}

/**
 * Free-disk admission for the data dir's filesystem: what writes there (a sandbox's disk
 * layer, a build's captures, an upload) is refused with 507 `disk_pressure` when it would
 * leave less free than the reserve, rather than failing half-way with ENOSPC (or leaving
 * the catalog and every running sandbox without room). Read on every admission (statfs
 * is microseconds). A reserve of 0 turns the admission off.
 */
export class DiskSpace {
  constructor(
    readonly dir: string,
    readonly reserveMiB: number,
    readonly stat: StatDisk = statDisk,
  ) {}

  /** The largest disk the node could ever give one template, MiB: its size less the reserve. */
  ceilingMiB(): number {
    return Math.max(0, Math.floor(this.stat(this.dir).totalBytes / MiB) - this.reserveMiB);
  }

  /** Refuses `what` (disk_pressure) when writing `bytes` more would leave less than the reserve. */
  admit(what: string, bytes = 0): void {
    if (this.reserveMiB <= 0) return;
    const { freeBytes } = this.stat(this.dir);
    if (freeBytes - bytes >= this.reserveMiB * MiB) return;
    const needs = bytes > 0 ? `, it needs ${mib(bytes)} MiB` : "";
    throw new WarrenError(
      "disk_pressure",
      `${what}: the data dir's disk has ${Math.floor(freeBytes / MiB)} MiB free${needs} and ${this.reserveMiB} MiB are kept in reserve (WARREN_DISK_RESERVE_MIB): free some (delete templates, snapshots or paused sandboxes) and retry`,
    );
  }
}

function mib(bytes: number): number {
  return Math.ceil(bytes / MiB);
}
