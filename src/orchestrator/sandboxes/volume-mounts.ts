import type { SandboxRow, TemplateRow } from "../../catalog/index.js";
import { WarrenError } from "../../shared/index.js";
import type { SandboxVolumeMount } from "../types.js";

/** The volumes a sandbox's guest mounts (its row's config), by id. */
export function mountedVolumeIds(row: SandboxRow): string[] {
  const mounts = (row.config.volumeMounts ?? []) as readonly SandboxVolumeMount[];
  return mounts.map((m) => m.volumeId);
}

/**
 * What a snapshot template's config keeps of its sandbox: the volumes its guest had
 * mounted. The mounts are in the captured kernel, so a sandbox made from it serves them too.
 */
export function snapshotTemplateConfig(
  volumeMounts: readonly SandboxVolumeMount[] | undefined,
): TemplateRow["config"] {
  return volumeMounts?.length ? { volumeMounts } : undefined;
}

/**
 * A new sandbox's mounts: its template's (a snapshot of a sandbox with volumes), then its
 * own. A path the template mounts already cannot take another volume.
 */
export function withTemplateVolumes(
  template: Pick<TemplateRow, "config">,
  requested: readonly SandboxVolumeMount[],
): SandboxVolumeMount[] {
  const inherited = (template.config?.volumeMounts ?? []) as readonly SandboxVolumeMount[];
  const taken = new Map(inherited.map((m) => [m.path, m]));
  const extra = requested.filter((m) => {
    const there = taken.get(m.path);
    if (!there) return true;
    if (there.volumeId === m.volumeId) return false;
    throw new WarrenError(
      "invalid_argument",
      `volumeMounts: ${m.path} has volume '${there.name}' mounted in the snapshot this sandbox starts from`,
    );
  });
  return [...inherited, ...extra];
}
