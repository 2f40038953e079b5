import { HOLDING_STATES } from "../catalog.js";
import { SANDBOX_COLUMNS } from "./rows.js";

// Every statement PostgresCatalog runs. `$1` is this node's id wherever a statement is scoped
// to a node (README: "Node scoping"); values always travel as parameters.

const JSON_COLUMNS: ReadonlySet<string> = new Set(["metadata", "env_vars", "config"]);
/** `$3, $4, ...` for SANDBOX_COLUMNS after `$1` (node) and `$2` (id), JSON ones cast. */
const sandboxValues = SANDBOX_COLUMNS.map(
  (column, i) => `$${i + 3}${JSON_COLUMNS.has(column) ? "::jsonb" : ""}`,
);

const TEMPLATE_SELECT = `
  SELECT t.id, t.team_id, t.kind, t.snapshot_id, t.vcpus, t.memory_mib, t.disk_size_mib, t.created_at,
    t.config,
    COALESCE((SELECT jsonb_agg(a.alias ORDER BY a.position) FROM template_aliases a
      WHERE a.scope = t.scope AND a.template_id = t.id), '[]'::jsonb) AS aliases
  FROM templates t`;

/** A snapshot (on any node) was captured from the sandbox row in scope: its envd token stays. */
const SNAPSHOTTED = "EXISTS (SELECT 1 FROM snapshots s WHERE s.sandbox_id = sandboxes.id)";

/** A sandbox holds CPU and memory (catalog's HOLDING_STATES). */
const HOLDING = `state IN (${HOLDING_STATES.map((state) => `'${state}'`).join(", ")})`;

/**
 * A team's lifecycle events on every node with what E2B's body needs of their sandbox, in
 * `order`: $1 team (NULL: all), $2 sandbox (NULL: all), $3 types (NULL: all), $4 limit, $5 offset.
 */
function lifecycleListing(order: "ASC" | "DESC"): string {
  return `
    SELECT e.event_id, e.at, e.kind, e.detail, e.lifecycle, e.sandbox_id, e.team_id,
      s.template_id, s.metadata, s.started_at, s.vcpus, s.memory_mib, s.snapshot_id
    FROM events e JOIN sandboxes s ON s.id = e.sandbox_id
    WHERE ($1::text IS NULL OR e.team_id = $1) AND e.lifecycle IS NOT NULL
      AND ($2::text IS NULL OR e.sandbox_id = $2)
      AND ($3::text[] IS NULL OR e.lifecycle = ANY ($3))
      AND COALESCE((s.config->>'internal')::boolean, false) = false
    ORDER BY e.at ${order}, e.id ${order} LIMIT $4 OFFSET $5`;
}

export const SQL = {
  // Team admission, across every node: one team's admissions wait for each other here.
  lockTeam: "SELECT pg_advisory_xact_lock(hashtextextended('warren-team-admission:' || $1, 0))",
  // What a team's other sandboxes hold, on every node; Warren's own VMs aside.
  teamUsage: `
    SELECT count(*) FILTER (WHERE ${HOLDING}) AS sandboxes,
      COALESCE(sum(vcpus) FILTER (WHERE ${HOLDING}), 0) AS vcpus,
      COALESCE(sum(memory_mib) FILTER (WHERE ${HOLDING}), 0) AS memory_mib,
      COALESCE(sum(disk_size_mib) FILTER (WHERE state <> 'killed'), 0) AS disk_mib
    FROM sandboxes
    WHERE team_id = $1 AND id <> $2 AND COALESCE((config->>'internal')::boolean, false) = false`,
  insertSandbox: `
    INSERT INTO sandboxes (node_id, id, ${SANDBOX_COLUMNS.join(", ")})
    VALUES ($1, $2, ${sandboxValues.join(", ")})`,
  updateSandbox: `
    UPDATE sandboxes SET ${SANDBOX_COLUMNS.map((c, i) => `${c} = ${sandboxValues[i]}`).join(", ")}
    WHERE node_id = $1 AND id = $2 RETURNING *`,
  getSandbox: "SELECT * FROM sandboxes WHERE node_id = $1 AND id = $2",
  findSandbox: "SELECT * FROM sandboxes WHERE id = $1",
  lockSandbox: "SELECT * FROM sandboxes WHERE node_id = $1 AND id = $2 FOR UPDATE",
  listSandboxes: `
    SELECT * FROM sandboxes WHERE node_id = $1 AND ($2::text[] IS NULL OR state = ANY ($2))
    ORDER BY started_at, id`,
  deleteSandbox: "DELETE FROM sandboxes WHERE node_id = $1 AND id = $2",
  // The WHERE repeats what the SET changes, so that the count is of rows really purged.
  purgeKilledSecrets: `
    UPDATE sandboxes SET env_vars = '{}', traffic_access_token = NULL,
      envd_access_token = CASE WHEN ${SNAPSHOTTED} THEN envd_access_token END
    WHERE node_id = $1 AND state = 'killed' AND updated_at < $2
      AND (env_vars <> '{}'::jsonb OR traffic_access_token IS NOT NULL
        OR (envd_access_token IS NOT NULL AND NOT ${SNAPSHOTTED}))
    RETURNING id`,

  // A template put again under another kind may change scope: the old scope's row goes.
  dropTemplateElsewhere: `
    DELETE FROM templates WHERE id = $2 AND scope IN ($1, '') AND scope <> $3`,
  putTemplate: `
    INSERT INTO templates
      (scope, id, kind, snapshot_id, vcpus, memory_mib, disk_size_mib, created_at, config,
        team_id)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10)
    ON CONFLICT (scope, id) DO UPDATE SET kind = excluded.kind, team_id = excluded.team_id,
      snapshot_id = excluded.snapshot_id, vcpus = excluded.vcpus,
      memory_mib = excluded.memory_mib, disk_size_mib = excluded.disk_size_mib,
      created_at = excluded.created_at, config = excluded.config`,
  clearAliases: "DELETE FROM template_aliases WHERE scope = $1 AND template_id = $2",
  // An alias held by another template of the scope and namespace ($4: the team, '' for the
  // global names) moves here instead of failing the put; another namespace's never does.
  putAliases: `
    INSERT INTO template_aliases (scope, namespace, alias, template_id, position)
    SELECT $1, $4, a.alias, $2, a.position
    FROM unnest($3::text[]) WITH ORDINALITY AS a (alias, position)
    ON CONFLICT (scope, namespace, alias) DO UPDATE SET template_id = excluded.template_id,
      position = excluded.position`,
  // As team $3 sees it (NULL: any id, global names): its own and the global templates. An id
  // first, then a global name, then the team's; this node's row before a cluster-wide one.
  getTemplate: `${TEMPLATE_SELECT}
    WHERE t.scope IN ($1, '') AND ($3::text IS NULL OR t.team_id IS NULL OR t.team_id = $3)
      AND (t.id = $2 OR EXISTS (SELECT 1 FROM template_aliases a
        WHERE a.scope = t.scope AND a.template_id = t.id AND a.alias = $2
          AND a.namespace IN ('', COALESCE($3::text, ''))))
    ORDER BY t.id = $2 DESC, t.team_id IS NOT NULL, t.scope = '' LIMIT 1`,
  listTemplates: `${TEMPLATE_SELECT} WHERE t.scope IN ($1, '') ORDER BY t.created_at, t.id`,
  deleteTemplate: "DELETE FROM templates WHERE scope IN ($1, '') AND id = $2",

  putBuild: `
    INSERT INTO builds (id, template_id, name, tags, status, vcpus, memory_mib, disk_size_mib,
      snapshot_id, layers, reason, created_at, updated_at, finished_at, team_id)
    VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9, $10::jsonb, $11::jsonb, $12, $13, $14, $15)
    ON CONFLICT (id) DO UPDATE SET template_id = excluded.template_id, name = excluded.name,
      team_id = excluded.team_id,
      tags = excluded.tags, status = excluded.status, vcpus = excluded.vcpus,
      memory_mib = excluded.memory_mib, disk_size_mib = excluded.disk_size_mib,
      snapshot_id = excluded.snapshot_id, layers = excluded.layers, reason = excluded.reason,
      created_at = excluded.created_at, updated_at = excluded.updated_at,
      finished_at = excluded.finished_at`,
  getBuild: "SELECT * FROM builds WHERE id = $1",
  listBuilds: `
    SELECT * FROM builds WHERE ($1::text IS NULL OR template_id = $1) ORDER BY created_at, id`,
  deleteBuild: "DELETE FROM builds WHERE id = $1",

  putTag: `
    INSERT INTO template_tags (template_id, tag, build_id, created_at) VALUES ($1, $2, $3, $4)
    ON CONFLICT (template_id, tag) DO UPDATE SET build_id = excluded.build_id,
      created_at = excluded.created_at`,
  getTag: "SELECT * FROM template_tags WHERE template_id = $1 AND tag = $2",
  listTags: "SELECT * FROM template_tags WHERE template_id = $1 ORDER BY tag",
  deleteTag: "DELETE FROM template_tags WHERE template_id = $1 AND tag = $2",

  // Replacing moves the row to this node; published_at is markPublished's alone.
  putSnapshot: `
    INSERT INTO snapshots (node_id, id, dir, sandbox_id, parent_id, kind, names,
      images_fingerprint, created_at, files)
    VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10::jsonb)
    ON CONFLICT (id) DO UPDATE SET node_id = excluded.node_id, dir = excluded.dir,
      sandbox_id = excluded.sandbox_id, parent_id = excluded.parent_id, kind = excluded.kind,
      names = excluded.names, images_fingerprint = excluded.images_fingerprint,
      created_at = excluded.created_at, files = excluded.files`,
  getSnapshot: "SELECT * FROM snapshots WHERE id = $1",
  listSnapshots: `
    SELECT * FROM snapshots
    WHERE node_id = $1 AND ($2::text IS NULL OR sandbox_id = $2)
      AND ($3::text IS NULL OR names @> jsonb_build_array($3::text))
    ORDER BY created_at, id`,
  deleteSnapshot: "DELETE FROM snapshots WHERE node_id = $1 AND id = $2",
  // Users on every node count: a snapshot one of them still needs must not be deleted.
  childSnapshots: "SELECT id FROM snapshots WHERE parent_id = $1 ORDER BY id",
  snapshotTemplates: "SELECT DISTINCT id FROM templates WHERE snapshot_id = $1 ORDER BY id",
  snapshotSandboxes: `
    SELECT id FROM sandboxes WHERE snapshot_id = $1 AND state <> 'killed' ORDER BY id`,

  // A lifecycle event takes its sandbox's team now: the team lists it by that column. Its
  // webhook deliveries are queued in the same statement (postgres-webhooks.ts).
  insertEvent: `
    WITH e AS (
      INSERT INTO events (sandbox_id, at, kind, detail, lifecycle, event_id, team_id)
      VALUES ($1, $2, $3, $4::jsonb, $5::text, $6,
        CASE WHEN $5::text IS NOT NULL THEN (SELECT team_id FROM sandboxes WHERE id = $1) END)
      RETURNING event_id, sandbox_id, at, lifecycle, team_id
    )
    INSERT INTO webhook_deliveries (webhook_id, event_id, sandbox_id, queued_at, due_at)
    SELECT w.id, e.event_id, e.sandbox_id, e.at, e.at
    FROM e JOIN webhooks w ON w.team_id = e.team_id
    WHERE e.lifecycle IS NOT NULL AND w.enabled AND w.events ? e.lifecycle`,
  // The inner query keeps the newest `limit` (NULL: all); the outer one puts them oldest first.
  listEvents: `
    SELECT sandbox_id, at, kind, detail, lifecycle FROM (
      SELECT id, sandbox_id, at, kind, detail, lifecycle FROM events
      WHERE sandbox_id = $1 AND ($2::timestamptz IS NULL OR at >= $2)
      ORDER BY at DESC, id DESC LIMIT $3
    ) newest ORDER BY at, id`,
  listLifecycleEventsNewestFirst: lifecycleListing("DESC"),
  listLifecycleEventsOldestFirst: lifecycleListing("ASC"),
  // What the purged events owed goes with them (a delivery of a gone event can never be sent).
  purgeEvents: `
    WITH gone AS (DELETE FROM events WHERE at < $1 RETURNING event_id),
      owed AS (DELETE FROM webhook_deliveries WHERE event_id IN (SELECT event_id FROM gone))
    SELECT count(*) AS n FROM gone`,
} as const;
