import { DiskReserve } from "./disk-reserve.js";
import { createNfsService, type NfsService } from "./nfs/nfs-server.js";
import { VolumeQuota } from "./quota.js";

/**
 * What one sandbox's NFS server serves, as plain data: the server decides it (Volumes.exportFor:
 * the team's own volumes only) and the guest services process serves it, which parses what
 * the guest sends and never sees the catalog.
 */
export interface NfsExport {
  readonly volumes: readonly { readonly key: string; readonly root: string }[];
  readonly teamId: string;
  /** The team's `maxVolumeBytes` and the directories of all its volumes (what counts). */
  readonly quota?: { readonly limitBytes: number; readonly roots: readonly string[] };
  /** The volumes' filesystem and the free space no write may eat into. */
  readonly disk: { readonly dir: string; readonly reserveMiB: number };
}

/**
 * Serves an export on the connections it is given. Its quota is measured here, by this
 * process (soft, as across nodes: the content API and every other sandbox count their own
 * writes in between measures).
 */
export function serveNfsExport(
  spec: NfsExport,
  options: { readonly stallMs?: number } = {},
): Promise<NfsService> {
  const { quota } = spec;
  const volumeQuota =
    quota &&
    new VolumeQuota({
      limitOf: async () => quota.limitBytes,
      rootsOf: async () => [...quota.roots],
    });
  return createNfsService({
    volumes: spec.volumes,
    disk: new DiskReserve({ dir: spec.disk.dir, reserveMiB: spec.disk.reserveMiB }),
    ...(volumeQuota && { admit: (bytes: number) => volumeQuota.admit(spec.teamId, bytes) }),
    ...options,
  });
}
