import type {
  BuildRow,
  EventRow,
  LifecycleEventRow,
  SandboxRow,
  SnapshotRow,
  TagRow,
  TemplateRow,
} from "../catalog.js";

/** Rows as SQLite returns them: snake_case columns, NULL for unset, JSON as text. */
export interface SandboxRecord {
  id: string;
  team_id: string;
  template_id: string;
  alias: string | null;
  state: SandboxRow["state"];
  client_id: string;
  envd_access_token: string | null;
  traffic_access_token: string | null;
  vcpus: number;
  memory_mib: number;
  disk_size_mib: number;
  metadata: string;
  env_vars: string;
  config: string;
  started_at: string;
  end_at: string;
  snapshot_id: string | null;
  ended_reason: string | null;
  updated_at: string;
}

export interface TemplateRecord {
  id: string;
  team_id: string | null;
  /** JSON array built by the query from template_aliases. */
  aliases: string;
  kind: TemplateRow["kind"];
  snapshot_id: string;
  vcpus: number;
  memory_mib: number;
  disk_size_mib: number;
  created_at: string;
  config: string;
}

export interface BuildRecord {
  id: string;
  team_id: string;
  template_id: string;
  name: string;
  tags: string;
  status: BuildRow["status"];
  vcpus: number;
  memory_mib: number;
  disk_size_mib: number;
  snapshot_id: string | null;
  layers: string;
  reason: string | null;
  created_at: string;
  updated_at: string;
  finished_at: string | null;
}

export interface TagRecord {
  template_id: string;
  tag: string;
  build_id: string;
  created_at: string;
}

export interface SnapshotRecord {
  id: string;
  dir: string;
  sandbox_id: string | null;
  parent_id: string | null;
  kind: string;
  names: string;
  images_fingerprint: string;
  created_at: string;
  files: string | null;
}

export interface EventRecord {
  sandbox_id: string;
  at: string;
  kind: string;
  detail: string | null;
  lifecycle: string | null;
}

/** A lifecycle event joined with its sandbox's columns (statements' lifecycleListing). */
export interface LifecycleEventRecord extends EventRecord {
  event_id: string;
  lifecycle: string;
  team_id: string;
  template_id: string;
  metadata: string;
  started_at: string;
  vcpus: number;
  memory_mib: number;
  snapshot_id: string | null;
}

/** Named parameters for a sandbox write; `?? null` because SQLite has no "absent". */
export function sandboxParams(row: SandboxRow): Record<string, string | number | null> {
  return {
    id: row.id,
    teamId: row.teamId,
    templateId: row.templateId,
    alias: row.alias ?? null,
    state: row.state,
    clientId: row.clientId,
    envdAccessToken: row.envdAccessToken ?? null,
    trafficAccessToken: row.trafficAccessToken ?? null,
    vcpus: row.vcpus,
    memoryMiB: row.memoryMiB,
    diskSizeMiB: row.diskSizeMiB,
    metadata: JSON.stringify(row.metadata),
    envVars: JSON.stringify(row.envVars),
    config: JSON.stringify(row.config),
    startedAt: row.startedAt,
    endAt: row.endAt,
    snapshotId: row.snapshotId ?? null,
    endedReason: row.endedReason ?? null,
    updatedAt: row.updatedAt,
  };
}

export function toSandboxRow(r: SandboxRecord): SandboxRow {
  return {
    id: r.id,
    teamId: r.team_id,
    templateId: r.template_id,
    ...optional("alias", r.alias),
    state: r.state,
    clientId: r.client_id,
    ...optional("envdAccessToken", r.envd_access_token),
    ...optional("trafficAccessToken", r.traffic_access_token),
    vcpus: r.vcpus,
    memoryMiB: r.memory_mib,
    diskSizeMiB: r.disk_size_mib,
    metadata: JSON.parse(r.metadata),
    envVars: JSON.parse(r.env_vars),
    config: JSON.parse(r.config),
    startedAt: r.started_at,
    endAt: r.end_at,
    ...optional("snapshotId", r.snapshot_id),
    ...optional("endedReason", r.ended_reason),
    updatedAt: r.updated_at,
  };
}

export function toTemplateRow(r: TemplateRecord): TemplateRow {
  return {
    id: r.id,
    ...optional("teamId", r.team_id),
    aliases: JSON.parse(r.aliases),
    kind: r.kind,
    snapshotId: r.snapshot_id,
    vcpus: r.vcpus,
    memoryMiB: r.memory_mib,
    diskSizeMiB: r.disk_size_mib,
    createdAt: r.created_at,
    ...(r.config !== "{}" && { config: JSON.parse(r.config) }),
  };
}

export function templateParams(row: TemplateRow): Record<string, string | number | null> {
  const { aliases: _aliases, config, teamId, ...rest } = row;
  return { ...rest, teamId: teamId ?? null, config: JSON.stringify(config ?? {}) };
}

export function buildParams(row: BuildRow): Record<string, string | number | null> {
  return {
    id: row.id,
    teamId: row.teamId,
    templateId: row.templateId,
    name: row.name,
    tags: JSON.stringify(row.tags),
    status: row.status,
    vcpus: row.vcpus,
    memoryMiB: row.memoryMiB,
    diskSizeMiB: row.diskSizeMiB,
    snapshotId: row.snapshotId ?? null,
    layers: JSON.stringify(row.layers),
    reason: row.reason === undefined ? null : JSON.stringify(row.reason),
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
    finishedAt: row.finishedAt ?? null,
  };
}

export function toBuildRow(r: BuildRecord): BuildRow {
  return {
    id: r.id,
    teamId: r.team_id,
    templateId: r.template_id,
    name: r.name,
    tags: JSON.parse(r.tags),
    status: r.status,
    vcpus: r.vcpus,
    memoryMiB: r.memory_mib,
    diskSizeMiB: r.disk_size_mib,
    ...optional("snapshotId", r.snapshot_id),
    layers: JSON.parse(r.layers),
    ...(r.reason !== null && { reason: JSON.parse(r.reason) }),
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    ...optional("finishedAt", r.finished_at),
  };
}

export function toTagRow(r: TagRecord): TagRow {
  return { templateId: r.template_id, tag: r.tag, buildId: r.build_id, createdAt: r.created_at };
}

export function snapshotParams(row: SnapshotRow): Record<string, string | null> {
  return {
    id: row.id,
    dir: row.dir,
    sandboxId: row.sandboxId ?? null,
    parentId: row.parentId ?? null,
    kind: row.kind,
    names: JSON.stringify(row.names),
    imagesFingerprint: row.imagesFingerprint,
    createdAt: row.createdAt,
    files: row.files ? JSON.stringify(row.files) : null,
  };
}

export function toSnapshotRow(r: SnapshotRecord): SnapshotRow {
  return {
    id: r.id,
    dir: r.dir,
    ...optional("sandboxId", r.sandbox_id),
    ...optional("parentId", r.parent_id),
    kind: r.kind,
    names: JSON.parse(r.names),
    imagesFingerprint: r.images_fingerprint,
    createdAt: r.created_at,
    ...(r.files ? { files: JSON.parse(r.files) } : {}),
  };
}

export function toEventRow(r: EventRecord): EventRow {
  return {
    at: r.at,
    sandboxId: r.sandbox_id,
    kind: r.kind,
    ...(r.detail !== null && { detail: JSON.parse(r.detail) }),
    ...optional("lifecycle", r.lifecycle),
  };
}

export function toLifecycleEventRow(r: LifecycleEventRecord): LifecycleEventRow {
  return {
    id: r.event_id,
    at: r.at,
    lifecycle: r.lifecycle,
    kind: r.kind,
    ...(r.detail !== null && { detail: JSON.parse(r.detail) }),
    sandbox: {
      id: r.sandbox_id,
      teamId: r.team_id,
      templateId: r.template_id,
      metadata: JSON.parse(r.metadata),
      startedAt: r.started_at,
      vcpus: r.vcpus,
      memoryMiB: r.memory_mib,
      ...optional("snapshotId", r.snapshot_id),
    },
  };
}

/** Leaves the key out entirely for NULL, so callers can rely on `"key" in row`. */
function optional<K extends string>(key: K, value: string | null): { [P in K]?: string } {
  return (value === null ? {} : { [key]: value }) as { [P in K]?: string };
}
