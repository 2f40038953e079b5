import type Database from "better-sqlite3";
import { HOLDING_STATES } from "../catalog.js";
import type { UsageRecord } from "../team-admission.js";
import type {
  BuildRecord,
  EventRecord,
  LifecycleEventRecord,
  SandboxRecord,
  SnapshotRecord,
  TagRecord,
  TemplateRecord,
} from "./rows.js";

/** Column name → named parameter (see sandboxParams); one list for INSERT and UPDATE. */
const SANDBOX_COLUMNS: ReadonlyArray<readonly [string, string]> = [
  ["team_id", "teamId"],
  ["template_id", "templateId"],
  ["alias", "alias"],
  ["state", "state"],
  ["client_id", "clientId"],
  ["envd_access_token", "envdAccessToken"],
  ["traffic_access_token", "trafficAccessToken"],
  ["vcpus", "vcpus"],
  ["memory_mib", "memoryMiB"],
  ["disk_size_mib", "diskSizeMiB"],
  ["metadata", "metadata"],
  ["env_vars", "envVars"],
  ["config", "config"],
  ["started_at", "startedAt"],
  ["end_at", "endAt"],
  ["snapshot_id", "snapshotId"],
  ["ended_reason", "endedReason"],
  ["updated_at", "updatedAt"],
];

const TEMPLATE_SELECT = `
  SELECT t.id, t.team_id, t.kind, t.snapshot_id, t.vcpus, t.memory_mib, t.disk_size_mib, t.created_at,
    t.config,
    (SELECT json_group_array(a.alias ORDER BY a.position) FROM template_aliases a
      WHERE a.template_id = t.id) AS aliases
  FROM templates t`;

/** A sandbox holds CPU and memory (catalog's HOLDING_STATES). */
const HOLDING = `state IN (${HOLDING_STATES.map((state) => `'${state}'`).join(", ")})`;

/** A snapshot was captured from the sandbox row in scope (its envd token must stay). */
const SNAPSHOTTED = "EXISTS (SELECT 1 FROM snapshots s WHERE s.sandbox_id = sandboxes.id)";

type Params = Record<string, unknown>;

/** Every statement, prepared once per connection. */
/** Which lifecycle listing: its order, and whether it names a team and a sandbox. */
export interface LifecycleListing {
  readonly ascending: boolean;
  readonly team: boolean;
  readonly sandbox: boolean;
}

/**
 * Lifecycle events with what E2B's body needs of their sandbox; `@types` a JSON array (NULL:
 * every type). One statement per shape, each filter written only when given, so that SQLite
 * walks an index: a sandbox's (events_by_sandbox) or a team's (events_by_team) — a page costs
 * its offset, not the team's whole history.
 */
function lifecycleListing({ ascending, team, sandbox }: LifecycleListing): string {
  const order = ascending ? "ASC" : "DESC";
  return `
    SELECT e.event_id, e.at, e.kind, e.detail, e.lifecycle, e.sandbox_id, e.team_id,
      s.template_id, s.metadata, s.started_at, s.vcpus, s.memory_mib, s.snapshot_id
    FROM events e JOIN sandboxes s ON s.id = e.sandbox_id
    WHERE e.lifecycle IS NOT NULL
      ${team ? "AND e.team_id = @teamId" : ""}
      ${sandbox ? "AND e.sandbox_id = @sandboxId" : ""}
      AND (@types IS NULL OR e.lifecycle IN (SELECT value FROM json_each(@types)))
      AND COALESCE(json_extract(s.config, '$.internal'), 0) = 0
    ORDER BY e.at ${order}, e.id ${order} LIMIT @limit OFFSET @offset`;
}

type Prepare = <R = unknown>(sql: string) => Database.Statement<[(Params | string)?], R>;

/** The events' statements: history, lifecycle listings, purge, webhook deliveries queued. */
function eventStatements(q: Prepare) {
  const prepared = new Map<
    string,
    Database.Statement<[(Params | string)?], LifecycleEventRecord>
  >();
  return {
    // A lifecycle event takes its sandbox's team now: the team lists it by that column.
    insertEvent: q(`
        INSERT INTO events (sandbox_id, at, kind, detail, lifecycle, event_id, team_id)
        VALUES (@sandboxId, @at, @kind, @detail, @lifecycle, @eventId,
          CASE WHEN @lifecycle IS NOT NULL
            THEN (SELECT team_id FROM sandboxes WHERE id = @sandboxId) END)`),
    // The inner query keeps the newest `limit`; the outer one puts them oldest first.
    listEvents: q<EventRecord>(`
        SELECT sandbox_id, at, kind, detail, lifecycle FROM (
          SELECT id, sandbox_id, at, kind, detail, lifecycle FROM events
          WHERE sandbox_id = @sandboxId AND (@since IS NULL OR at >= @since)
          ORDER BY at DESC, id DESC LIMIT @limit
        ) ORDER BY at, id`),
    /** One statement per shape, prepared on first use. */
    listLifecycleEvents: (shape: LifecycleListing) => {
      const key = JSON.stringify(shape);
      let statement = prepared.get(key);
      if (!statement) {
        statement = q<LifecycleEventRecord>(lifecycleListing(shape));
        prepared.set(key, statement);
      }
      return statement;
    },
    purgeEvents: q("DELETE FROM events WHERE at < ?"),
    // What purged events owed (a delivery of a gone event can never be sent): with the purge.
    purgeDeliveries: q(`
        DELETE FROM webhook_deliveries
        WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.event_id = webhook_deliveries.event_id)`),
    // A delivery of the event just recorded for every enabled webhook of its team that
    // lists its type: in the event's own transaction, so neither is kept without the other.
    enqueueDeliveries: q(`
        INSERT INTO webhook_deliveries (webhook_id, event_id, sandbox_id, queued_at, due_at)
        SELECT w.id, e.event_id, e.sandbox_id, e.at, e.at
        FROM events e JOIN webhooks w ON w.team_id = e.team_id
        WHERE e.event_id = ? AND w.enabled = 1
          AND EXISTS (SELECT 1 FROM json_each(w.events) WHERE value = e.lifecycle)`),
  };
}

export function prepareStatements(db: Database.Database) {
  const cols = SANDBOX_COLUMNS.map(([c]) => c).join(", ");
  const params = SANDBOX_COLUMNS.map(([, p]) => `@${p}`).join(", ");
  const sets = SANDBOX_COLUMNS.map(([c, p]) => `${c} = @${p}`).join(", ");
  const q = <R = unknown>(sql: string) => db.prepare<[(Params | string)?], R>(sql);
  return {
    insertSandbox: q(`INSERT INTO sandboxes (id, ${cols}) VALUES (@id, ${params})`),
    updateSandbox: q(`UPDATE sandboxes SET ${sets} WHERE id = @id`),
    getSandbox: q<SandboxRecord>("SELECT * FROM sandboxes WHERE id = ?"),
    listSandboxes: q<SandboxRecord>("SELECT * FROM sandboxes ORDER BY started_at, id"),
    // One statement for any set of states: the list travels as a JSON array.
    listSandboxesIn: q<SandboxRecord>(
      "SELECT * FROM sandboxes WHERE state IN (SELECT value FROM json_each(?)) ORDER BY started_at, id",
    ),
    deleteSandbox: q("DELETE FROM sandboxes WHERE id = ?"),
    // What a team's other sandboxes hold (team admission); Warren's own VMs aside.
    teamUsage: db.prepare<[string, string], UsageRecord>(`
        SELECT COALESCE(SUM(${HOLDING}), 0) AS sandboxes,
          COALESCE(SUM(CASE WHEN ${HOLDING} THEN vcpus ELSE 0 END), 0) AS vcpus,
          COALESCE(SUM(CASE WHEN ${HOLDING} THEN memory_mib ELSE 0 END), 0) AS memory_mib,
          COALESCE(SUM(CASE WHEN state <> 'killed' THEN disk_size_mib ELSE 0 END), 0) AS disk_mib
        FROM sandboxes
        WHERE team_id = ? AND id <> ? AND COALESCE(json_extract(config, '$.internal'), 0) = 0`),
    // The WHERE repeats what the SET changes, so that the count is of rows really purged.
    purgeKilledSecrets: q(`
        UPDATE sandboxes SET env_vars = '{}', traffic_access_token = NULL,
          envd_access_token = CASE WHEN ${SNAPSHOTTED} THEN envd_access_token END
        WHERE state = 'killed' AND updated_at < @killedBefore
          AND (env_vars <> '{}' OR traffic_access_token IS NOT NULL
            OR (envd_access_token IS NOT NULL AND NOT ${SNAPSHOTTED}))`),
    putTemplate: q(`
        INSERT INTO templates
          (id, team_id, kind, snapshot_id, vcpus, memory_mib, disk_size_mib, created_at, config)
        VALUES (@id, @teamId, @kind, @snapshotId, @vcpus, @memoryMiB, @diskSizeMiB, @createdAt,
          @config)
        ON CONFLICT (id) DO UPDATE SET team_id = excluded.team_id, kind = excluded.kind,
          snapshot_id = excluded.snapshot_id,
          vcpus = excluded.vcpus, memory_mib = excluded.memory_mib,
          disk_size_mib = excluded.disk_size_mib, created_at = excluded.created_at,
          config = excluded.config`),
    clearAliases: q("DELETE FROM template_aliases WHERE template_id = ?"),
    // An alias another template of the namespace holds moves here instead of failing the
    // put; another namespace's (another team's, or the global one) is never touched.
    putAlias: q(`
        INSERT INTO template_aliases (namespace, alias, template_id, position)
        VALUES (@namespace, @alias, @id, @position)
        ON CONFLICT (namespace, alias) DO UPDATE SET template_id = excluded.template_id,
          position = excluded.position`),
    // As @team sees it (NULL: any id, global names): its own and the global templates; an
    // id first, then a global name, then the team's.
    getTemplate: q<TemplateRecord>(`${TEMPLATE_SELECT}
        WHERE (@team IS NULL OR t.team_id IS NULL OR t.team_id = @team)
          AND (t.id = @key OR t.id IN (SELECT a.template_id FROM template_aliases a
            WHERE a.alias = @key AND a.namespace IN ('', COALESCE(@team, ''))))
        ORDER BY t.id = @key DESC, t.team_id IS NOT NULL LIMIT 1`),
    listTemplates: q<TemplateRecord>(`${TEMPLATE_SELECT} ORDER BY t.created_at, t.id`),
    deleteTemplate: q("DELETE FROM templates WHERE id = ?"),
    putBuild: q(`
        INSERT OR REPLACE INTO builds (id, team_id, template_id, name, tags, status, vcpus,
          memory_mib, disk_size_mib, snapshot_id, layers, reason, created_at, updated_at,
          finished_at)
        VALUES (@id, @teamId, @templateId, @name, @tags, @status, @vcpus, @memoryMiB,
          @diskSizeMiB, @snapshotId, @layers, @reason, @createdAt, @updatedAt, @finishedAt)`),
    getBuild: q<BuildRecord>("SELECT * FROM builds WHERE id = ?"),
    listBuilds: q<BuildRecord>(`
        SELECT * FROM builds WHERE (@templateId IS NULL OR template_id = @templateId)
        ORDER BY created_at, id`),
    deleteBuild: q("DELETE FROM builds WHERE id = ?"),
    putTag: q(`
        INSERT OR REPLACE INTO template_tags (template_id, tag, build_id, created_at)
        VALUES (@templateId, @tag, @buildId, @createdAt)`),
    getTag: q<TagRecord>(
      "SELECT * FROM template_tags WHERE template_id = @templateId AND tag = @tag",
    ),
    listTags: q<TagRecord>("SELECT * FROM template_tags WHERE template_id = ? ORDER BY tag"),
    deleteTag: q("DELETE FROM template_tags WHERE template_id = @templateId AND tag = @tag"),
    putSnapshot: q(`
        INSERT OR REPLACE INTO snapshots
          (id, dir, sandbox_id, parent_id, kind, names, images_fingerprint, created_at, files)
        VALUES (@id, @dir, @sandboxId, @parentId, @kind, @names, @imagesFingerprint, @createdAt,
          @files)`),
    getSnapshot: q<SnapshotRecord>("SELECT * FROM snapshots WHERE id = ?"),
    listSnapshots: q<SnapshotRecord>(`
        SELECT * FROM snapshots
        WHERE (@sandboxId IS NULL OR sandbox_id = @sandboxId)
          AND (@name IS NULL OR EXISTS (SELECT 1 FROM json_each(names) WHERE value = @name))
        ORDER BY created_at, id`),
    deleteSnapshot: q("DELETE FROM snapshots WHERE id = ?"),
    childSnapshots: q<string>("SELECT id FROM snapshots WHERE parent_id = ? ORDER BY id").pluck(),
    snapshotTemplates: q<string>(
      "SELECT id FROM templates WHERE snapshot_id = ? ORDER BY id",
    ).pluck(),
    snapshotSandboxes: q<string>(
      "SELECT id FROM sandboxes WHERE snapshot_id = ? AND state <> 'killed' ORDER BY id",
    ).pluck(),
    ...eventStatements(q),
  };
}

export type Statements = ReturnType<typeof prepareStatements>;
