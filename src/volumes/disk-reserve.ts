import { statfsSync } from "node:fs";
import { dirname } from "node:path";
import { WarrenError } from "../shared/index.js";

const MiB = 1024 * 1024;

export interface DiskReserveOptions {
  /** A directory on the volumes' filesystem. */
  readonly dir: string;
  /** Free space no volume write may eat into (WARREN_DISK_RESERVE_MIB); 0: no check. */
  readonly reserveMiB: number;
  /** Bytes an unprivileged writer may still use there (default: statfs's bavail). */
  readonly freeBytes?: (dir: string) => number;
}

/**
 * The free-space floor of the volumes' filesystem, which usually holds the catalog and the
 * sandboxes' disks too: a guest's `dd` into a mounted volume, or an upload through the
 * content API, stops at the reserve (NFS NOSPC, 507 disk_pressure) instead of filling the
 * disk under the node. Read on every admission: statfs takes microseconds.
 */
export class DiskReserve {
  readonly #o: DiskReserveOptions;

  constructor(options: DiskReserveOptions) {
    this.#o = options;
  }

  /** Whether `bytes` more leave the reserve free. */
  admits(bytes: number): boolean {
    return this.#o.reserveMiB <= 0 || this.available() >= bytes;
  }

  /** Free bytes above the reserve (what a guest's `df` is told is free). */
  available(): number {
    return Math.max(0, this.#free() - this.#o.reserveMiB * MiB);
  }

  /** Throws disk_pressure (507) unless `bytes` more leave the reserve free. */
  check(bytes: number): void {
    if (this.admits(bytes)) return;
    throw new WarrenError(
      "disk_pressure",
      `the volumes' disk has ${Math.floor(this.#free() / MiB)} MiB free and ${this.#o.reserveMiB} MiB are kept in reserve (WARREN_DISK_RESERVE_MIB): remove files from volumes, or free disk on the node, and retry`,
    );
  }

  #free(): number {
    return (this.#o.freeBytes ?? statFree)(this.#o.dir);
  }
}

/** statfs(2) of `dir`, or of its nearest existing parent (before the first volume is made). */
function statFree(dir: string): number {
  for (let path = dir; ; path = dirname(path)) {
    try {
      const fs = statfsSync(path);
      // bavail, not bfree: the blocks root keeps for itself are the host's, not the volumes'.
      return fs.bavail * fs.bsize;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT" || dirname(path) === path) throw err;
    }
  }
}
