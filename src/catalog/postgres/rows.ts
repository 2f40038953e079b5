import type {
  BuildRow,
  EventRow,
  LifecycleEventRow,
  SandboxRow,
  SnapshotRow,
  TagRow,
  TemplateRow,
} from "../catalog.js";
import type { Param } from "./pool.js";

/**
 * Rows as pg returns them: snake_case columns, null for unset, JSONB already parsed (a
 * fresh object per read), TIMESTAMPTZ as a Date (milliseconds, as Warren writes them).
 */
export interface SandboxRecord {
  id: string;
  team_id: string;
  node_id: string;
  template_id: string;
  alias: string | null;
  state: SandboxRow["state"];
  client_id: string;
  envd_access_token: string | null;
  traffic_access_token: string | null;
  vcpus: number;
  memory_mib: number;
  disk_size_mib: number;
  metadata: Record<string, string>;
  env_vars: Record<string, string>;
  config: Record<string, unknown>;
  started_at: Date;
  end_at: Date;
  snapshot_id: string | null;
  ended_reason: string | null;
  updated_at: Date;
}

export interface TemplateRecord {
  id: string;
  team_id: string | null;
  aliases: string[];
  kind: TemplateRow["kind"];
  snapshot_id: string;
  vcpus: number;
  memory_mib: number;
  disk_size_mib: number;
  created_at: Date;
  config: Record<string, unknown>;
}

export interface BuildRecord {
  id: string;
  team_id: string;
  template_id: string;
  name: string;
  tags: string[];
  status: BuildRow["status"];
  vcpus: number;
  memory_mib: number;
  disk_size_mib: number;
  snapshot_id: string | null;
  layers: string[];
  reason: BuildRow["reason"] | null;
  created_at: Date;
  updated_at: Date;
  finished_at: Date | null;
}

export interface TagRecord {
  template_id: string;
  tag: string;
  build_id: string;
  created_at: Date;
}

export interface SnapshotRecord {
  id: string;
  node_id: string;
  dir: string;
  sandbox_id: string | null;
  parent_id: string | null;
  kind: string;
  names: string[];
  images_fingerprint: string;
  created_at: Date;
  files: SnapshotRow["files"] | null;
  published_at: Date | null;
}

export interface EventRecord {
  sandbox_id: string;
  at: Date;
  kind: string;
  detail: Record<string, unknown> | null;
  lifecycle: string | null;
}

/** A lifecycle event joined with its sandbox's columns (statements' lifecycleListing). */
export interface LifecycleEventRecord extends EventRecord {
  event_id: string;
  lifecycle: string;
  team_id: string;
  template_id: string;
  metadata: Record<string, string>;
  started_at: Date;
  vcpus: number;
  memory_mib: number;
  snapshot_id: string | null;
}

/** Sandbox columns after id and node_id, in the order of sandboxParams. */
export const SANDBOX_COLUMNS = [
  "team_id",
  "template_id",
  "alias",
  "state",
  "client_id",
  "envd_access_token",
  "traffic_access_token",
  "vcpus",
  "memory_mib",
  "disk_size_mib",
  "metadata",
  "env_vars",
  "config",
  "started_at",
  "end_at",
  "snapshot_id",
  "ended_reason",
  "updated_at",
] as const;

/** Values for SANDBOX_COLUMNS, in order; JSON as text for the `::jsonb` casts. */
export function sandboxParams(row: SandboxRow): Param[] {
  return [
    row.teamId,
    row.templateId,
    row.alias ?? null,
    row.state,
    row.clientId,
    row.envdAccessToken ?? null,
    row.trafficAccessToken ?? null,
    row.vcpus,
    row.memoryMiB,
    row.diskSizeMiB,
    JSON.stringify(row.metadata),
    JSON.stringify(row.envVars),
    JSON.stringify(row.config),
    row.startedAt,
    row.endAt,
    row.snapshotId ?? null,
    row.endedReason ?? null,
    row.updatedAt,
  ];
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
    metadata: r.metadata,
    envVars: r.env_vars,
    config: r.config,
    startedAt: r.started_at.toISOString(),
    endAt: r.end_at.toISOString(),
    ...optional("snapshotId", r.snapshot_id),
    ...optional("endedReason", r.ended_reason),
    updatedAt: r.updated_at.toISOString(),
  };
}

export function toTemplateRow(r: TemplateRecord): TemplateRow {
  return {
    id: r.id,
    ...optional("teamId", r.team_id),
    aliases: r.aliases,
    kind: r.kind,
    snapshotId: r.snapshot_id,
    vcpus: r.vcpus,
    memoryMiB: r.memory_mib,
    diskSizeMiB: r.disk_size_mib,
    createdAt: r.created_at.toISOString(),
    ...(Object.keys(r.config).length > 0 && { config: r.config }),
  };
}

export function toBuildRow(r: BuildRecord): BuildRow {
  return {
    id: r.id,
    teamId: r.team_id,
    templateId: r.template_id,
    name: r.name,
    tags: r.tags,
    status: r.status,
    vcpus: r.vcpus,
    memoryMiB: r.memory_mib,
    diskSizeMiB: r.disk_size_mib,
    ...optional("snapshotId", r.snapshot_id),
    layers: r.layers,
    ...(r.reason !== null && { reason: r.reason }),
    createdAt: r.created_at.toISOString(),
    updatedAt: r.updated_at.toISOString(),
    ...optional("finishedAt", r.finished_at?.toISOString() ?? null),
  };
}

export function toTagRow(r: TagRecord): TagRow {
  return {
    templateId: r.template_id,
    tag: r.tag,
    buildId: r.build_id,
    createdAt: r.created_at.toISOString(),
  };
}

/** `ownNode`: the reading catalog's node; another node's snapshot carries its nodeId. */
export function toSnapshotRow(r: SnapshotRecord, ownNode: string): SnapshotRow {
  return {
    id: r.id,
    dir: r.dir,
    ...optional("sandboxId", r.sandbox_id),
    ...optional("parentId", r.parent_id),
    kind: r.kind,
    names: r.names,
    imagesFingerprint: r.images_fingerprint,
    createdAt: r.created_at.toISOString(),
    ...(r.files !== null && { files: r.files }),
    ...optional("publishedAt", r.published_at?.toISOString() ?? null),
    ...(r.node_id !== ownNode && { nodeId: r.node_id }),
  };
}

export function toEventRow(r: EventRecord): EventRow {
  return {
    at: r.at.toISOString(),
    sandboxId: r.sandbox_id,
    kind: r.kind,
    ...(r.detail !== null && { detail: r.detail }),
    ...optional("lifecycle", r.lifecycle),
  };
}

export function toLifecycleEventRow(r: LifecycleEventRecord): LifecycleEventRow {
  return {
    id: r.event_id,
    at: r.at.toISOString(),
    lifecycle: r.lifecycle,
    kind: r.kind,
    ...(r.detail !== null && { detail: r.detail }),
    sandbox: {
      id: r.sandbox_id,
      teamId: r.team_id,
      templateId: r.template_id,
      metadata: r.metadata,
      startedAt: r.started_at.toISOString(),
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
