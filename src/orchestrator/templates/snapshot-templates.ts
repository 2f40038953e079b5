import type { Catalog, TemplateRow } from "../../catalog/index.js";
import type { PoolTemplate } from "../pool/warm-pool.js";
import type { SnapshotInfo } from "../types.js";
import { isCodeInterpreter, warmInterpreter } from "./code-interpreter-template.js";

/** E2B names a snapshot `<name or template id>:<tag>`; Warren has one tag, `default`. */
export function snapshotInfo(template: TemplateRow, sandboxId: string | undefined): SnapshotInfo {
  const name = template.aliases[0];
  return {
    templateId: template.id,
    ...(template.teamId !== undefined && { teamId: template.teamId }),
    snapshotId: `${name ?? template.id}:default`,
    names: template.aliases.map((alias) => `${alias}:default`),
    sandboxId,
    createdAt: new Date(template.createdAt),
  };
}

/** Persistent snapshots (templates of kind "snapshot"), oldest first. */
export async function listSnapshotTemplates(
  catalog: Catalog,
  filter: { sandboxId?: string; name?: string; teamId?: string },
): Promise<SnapshotInfo[]> {
  const infos: SnapshotInfo[] = [];
  for (const template of await catalog.listTemplates()) {
    if (template.kind !== "snapshot") continue;
    if (filter.teamId !== undefined && template.teamId !== filter.teamId) continue;
    const snapshot = await catalog.getSnapshot(template.snapshotId);
    if (filter.sandboxId && snapshot?.sandboxId !== filter.sandboxId) continue;
    const info = snapshotInfo(template, snapshot?.sandboxId);
    const named =
      template.aliases.includes(filter.name ?? "") || info.names.includes(filter.name ?? "");
    if (filter.name && !named) continue;
    infos.push(info);
  }
  return infos.sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime());
}

/**
 * What a create from this template starts with, from one read of its snapshot: the envd
 * access token captured in it (its source sandbox's, kept after it ends) and what the warm
 * pool needs to warm VMMs of it.
 */
export async function templateStart(
  catalog: Catalog,
  template: TemplateRow,
  localDir: (snapshotId: string) => Promise<string>,
): Promise<{ presentToken?: string; pool?: PoolTemplate }> {
  const snapshot = await catalog.getSnapshot(template.snapshotId);
  if (!snapshot) return {};
  const pool = {
    snapshotId: snapshot.id,
    dir: await localDir(snapshot.id),
    shape: template,
    ...(isCodeInterpreter(template) && { warmUp: warmInterpreter }),
  };
  if (!snapshot.sandboxId) return { pool };
  const token = (await catalog.findSandbox(snapshot.sandboxId))?.envdAccessToken;
  return { presentToken: token, pool: { ...pool, ...(token && { token }) } };
}
