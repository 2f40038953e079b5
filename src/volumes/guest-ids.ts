import type { Dirent } from "node:fs";
import { lchown, lstat, readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { WarrenError } from "../shared/index.js";

/** Ids a guest's files may carry: what the services' user namespace maps (0-65535). */
export const GUEST_IDS = 65_536;
/** The anonymous id, for a host owner outside the range. */
const NOBODY = 65_534;

/**
 * How volumes' owners are kept on the host. The guest services process serves NFS in a user
 * namespace whose ids 0-65535 are the host's `base` to `base + 65535`
 * (WARREN_GUEST_ID_BASE): a guest's uid `u` owns what it writes as `base + u` on the host,
 * so the process's capabilities reach the volumes and nothing else of the host. The content
 * API, which runs as the host's root, says and sets owners the same way.
 */
export class GuestIds {
  constructor(readonly base: number) {
    if (!Number.isSafeInteger(base) || base <= 0) {
      throw new WarrenError("invalid_argument", `a guest id range must start above 0, not ${base}`);
    }
  }

  /** The host's id of a guest's. */
  host(id: number): number {
    if (!Number.isInteger(id) || id < 0 || id >= GUEST_IDS) {
      throw new WarrenError("invalid_argument", `an owner must be from 0 to ${GUEST_IDS - 1}`);
    }
    return this.base + id;
  }

  /** A guest's id of the host's (the anonymous id for one outside the range, as NFS says). */
  guest(hostId: number): number {
    const id = hostId - this.base;
    return id >= 0 && id < GUEST_IDS ? id : NOBODY;
  }
}

/**
 * Moves every entry of the volumes under `dir` to the guest id range once (volumes made
 * before it was used held the guests' raw ids, and root's): each owner `u` below 65536
 * becomes `base + u`, and `dir` itself the range's root. Run before anything serves the
 * volumes (no guest writes meanwhile); links are changed, never followed. A directory shifted
 * to another base is refused: its owners would be read wrong.
 */
export async function shiftVolumeOwners(dir: string, ids: GuestIds): Promise<number> {
  // Beside the directory, not in it: the directory is the range's root's, the marker root's.
  const marker = `${dir}.guest-ids`;
  const done = await readFile(marker, "utf8").catch(() => undefined);
  if (done !== undefined) {
    if (Number(done.trim()) === ids.base) return 0;
    throw new WarrenError(
      "invalid_argument",
      `${dir} holds volumes owned from guest id ${done.trim()}, not WARREN_GUEST_ID_BASE ${ids.base}: set it back`,
    );
  }
  let changed = 0;
  const shift = async (path: string) => {
    const stats = await lstat(path);
    const uid = stats.uid < GUEST_IDS ? ids.host(stats.uid) : stats.uid;
    const gid = stats.gid < GUEST_IDS ? ids.host(stats.gid) : stats.gid;
    if (uid !== stats.uid || gid !== stats.gid) {
      await lchown(path, uid, gid);
      changed += 1;
    }
    if (!stats.isDirectory()) return;
    const entries: Dirent[] = await readdir(path, { withFileTypes: true });
    for (const entry of entries) await shift(join(path, entry.name));
  };
  const volumes = await readdir(dir, { withFileTypes: true });
  for (const volume of volumes) if (volume.isDirectory()) await shift(join(dir, volume.name));
  await lchown(dir, ids.base, ids.base);
  await writeFile(marker, `${ids.base}\n`, { mode: 0o600 });
  return changed;
}
