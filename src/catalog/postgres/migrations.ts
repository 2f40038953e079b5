import type pg from "pg";
import { WarrenError } from "../../shared/index.js";

/**
 * Schema steps, oldest first; step i brings the database to version i + 1, recorded as a
 * row of `warren_schema`. Never edit a released step: append a new one, since databases in
 * the field have already run it. JSON columns are JSONB, times TIMESTAMPTZ.
 *
 * Node scoping (README): sandboxes and snapshots carry the node that holds them; templates
 * carry a `scope`, the node id for node-local kinds (base, layer) and '' for cluster-wide
 * ones (snapshot, build), so that each node's base and layers (whose ids are derived from
 * their content, the same on every node) have rows of their own. An alias is unique within
 * its scope and its namespace (the template's team, '' for the global names).
 */
export const MIGRATIONS: readonly string[] = [
  `
  CREATE TABLE nodes (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('up', 'draining', 'down')),
    capacity JSONB NOT NULL,
    labels JSONB NOT NULL,
    load JSONB,
    registered_at TIMESTAMPTZ NOT NULL,
    last_heartbeat TIMESTAMPTZ NOT NULL
  );

  CREATE TABLE sandboxes (
    id TEXT PRIMARY KEY,
    node_id TEXT NOT NULL,
    template_id TEXT NOT NULL,
    alias TEXT,
    state TEXT NOT NULL,
    client_id TEXT NOT NULL,
    envd_access_token TEXT,
    traffic_access_token TEXT,
    vcpus INTEGER NOT NULL,
    memory_mib INTEGER NOT NULL,
    disk_size_mib INTEGER NOT NULL,
    metadata JSONB NOT NULL,
    env_vars JSONB NOT NULL,
    config JSONB NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    end_at TIMESTAMPTZ NOT NULL,
    snapshot_id TEXT,
    ended_reason TEXT,
    updated_at TIMESTAMPTZ NOT NULL
  );
  CREATE INDEX sandboxes_by_node ON sandboxes (node_id, started_at, id);
  CREATE INDEX sandboxes_by_state ON sandboxes (state, started_at, id);
  CREATE INDEX sandboxes_by_snapshot ON sandboxes (snapshot_id) WHERE snapshot_id IS NOT NULL;

  CREATE TABLE templates (
    scope TEXT NOT NULL,
    id TEXT NOT NULL,
    kind TEXT NOT NULL,
    snapshot_id TEXT NOT NULL,
    vcpus INTEGER NOT NULL,
    memory_mib INTEGER NOT NULL,
    disk_size_mib INTEGER NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    config JSONB NOT NULL,
    PRIMARY KEY (scope, id)
  );
  CREATE INDEX templates_by_snapshot ON templates (snapshot_id);

  -- An alias is unique within its scope; position keeps the order the template gave.
  CREATE TABLE template_aliases (
    scope TEXT NOT NULL,
    alias TEXT NOT NULL,
    template_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (scope, alias),
    FOREIGN KEY (scope, template_id) REFERENCES templates (scope, id) ON DELETE CASCADE
  );
  CREATE INDEX template_aliases_by_template ON template_aliases (scope, template_id);

  CREATE TABLE builds (
    id TEXT PRIMARY KEY,
    template_id TEXT NOT NULL,
    name TEXT NOT NULL,
    tags JSONB NOT NULL,
    status TEXT NOT NULL,
    vcpus INTEGER NOT NULL,
    memory_mib INTEGER NOT NULL,
    disk_size_mib INTEGER NOT NULL,
    snapshot_id TEXT,
    layers JSONB NOT NULL,
    reason JSONB,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    finished_at TIMESTAMPTZ
  );
  CREATE INDEX builds_by_template ON builds (template_id, created_at, id);

  CREATE TABLE template_tags (
    template_id TEXT NOT NULL,
    tag TEXT NOT NULL,
    build_id TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (template_id, tag)
  );

  CREATE TABLE snapshots (
    id TEXT PRIMARY KEY,
    node_id TEXT NOT NULL,
    dir TEXT NOT NULL,
    sandbox_id TEXT,
    parent_id TEXT,
    kind TEXT NOT NULL,
    names JSONB NOT NULL,
    images_fingerprint TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    files JSONB,
    published_at TIMESTAMPTZ
  );
  CREATE INDEX snapshots_by_node ON snapshots (node_id, created_at, id);
  CREATE INDEX snapshots_by_sandbox ON snapshots (sandbox_id) WHERE sandbox_id IS NOT NULL;
  CREATE INDEX snapshots_by_parent ON snapshots (parent_id) WHERE parent_id IS NOT NULL;

  -- The serial id orders events that share a timestamp.
  CREATE TABLE events (
    id BIGSERIAL PRIMARY KEY,
    sandbox_id TEXT NOT NULL,
    at TIMESTAMPTZ NOT NULL,
    kind TEXT NOT NULL,
    detail JSONB
  );
  CREATE INDEX events_by_sandbox ON events (sandbox_id, at, id);
  `,
  // Secrets of the cluster as a whole: the cluster key (ClusterCatalog.clusterKey).
  `
  CREATE TABLE cluster_secrets (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
  );
  `,
  // Teams and their keys (hashed), shared by every node and gateway; every sandbox, build
  // and team template names its team. What existed before belongs to the default team.
  `
  CREATE TABLE teams (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    limits JSONB NOT NULL
  );
  INSERT INTO teams (id, name, created_at, limits) VALUES ('default', 'default', now(), '{}');

  CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    hash TEXT NOT NULL UNIQUE,
    mask JSONB NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    last_used_at TIMESTAMPTZ
  );
  CREATE INDEX api_keys_by_team ON api_keys (team_id, created_at, id);

  ALTER TABLE sandboxes ADD COLUMN team_id TEXT NOT NULL DEFAULT 'default';
  CREATE INDEX sandboxes_by_team ON sandboxes (team_id, state);
  ALTER TABLE builds ADD COLUMN team_id TEXT NOT NULL DEFAULT 'default';
  ALTER TABLE templates ADD COLUMN team_id TEXT;
  UPDATE templates SET team_id = 'default' WHERE kind IN ('snapshot', 'build');
  `,
  // The cluster key retired: gateways and nodes prove who they are with certificates from
  // the cluster CA, which is not in the database. A key anyone with the database URL could
  // read is no credential; none is kept.
  `
  DROP TABLE cluster_secrets;
  `,
  // Volumes, by team; a name is unique within its team.
  `
  CREATE TABLE volumes (
    id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    token TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    UNIQUE (team_id, name)
  );
  `,
  // Secrets, by team, sealed; a name is unique within its team.
  `
  CREATE TABLE secrets (
    id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    version BIGINT NOT NULL,
    metadata JSONB NOT NULL,
    sealed TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    UNIQUE (team_id, name)
  );
  `,
  // Template names are per team: an alias is unique within its scope and its namespace, the
  // template's team or '' for a template without one (the global names every team sees).
  // Existing aliases keep their template's team.
  `
  ALTER TABLE template_aliases ADD COLUMN namespace TEXT NOT NULL DEFAULT '';
  UPDATE template_aliases a SET namespace = t.team_id
    FROM templates t
    WHERE t.scope = a.scope AND t.id = a.template_id AND t.team_id IS NOT NULL;
  ALTER TABLE template_aliases ALTER COLUMN namespace DROP DEFAULT;
  ALTER TABLE template_aliases DROP CONSTRAINT template_aliases_pkey;
  ALTER TABLE template_aliases ADD PRIMARY KEY (scope, namespace, alias);
  `,
  // E2B's lifecycle events are history entries with a type, an id and their sandbox's team
  // (GET /events/sandboxes lists a team's); earlier entries have none and are not listed.
  `
  ALTER TABLE events ADD COLUMN lifecycle TEXT, ADD COLUMN event_id TEXT, ADD COLUMN team_id TEXT;
  CREATE INDEX events_by_team ON events (team_id, at, id) WHERE lifecycle IS NOT NULL;
  `,
  // A team's webhooks, and the deliveries owed to them (queued with their events).
  `
  CREATE TABLE webhooks (
    id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    url TEXT NOT NULL,
    enabled BOOLEAN NOT NULL,
    events JSONB NOT NULL,
    sealed_secret TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    last_delivery JSONB,
    failures INTEGER NOT NULL DEFAULT 0
  );
  CREATE INDEX webhooks_by_team ON webhooks (team_id, created_at, id);
  CREATE TABLE webhook_deliveries (
    id BIGSERIAL PRIMARY KEY,
    webhook_id TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id TEXT NOT NULL,
    sandbox_id TEXT NOT NULL,
    queued_at TIMESTAMPTZ NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    due_at TIMESTAMPTZ NOT NULL,
    leased_until TIMESTAMPTZ
  );
  CREATE INDEX webhook_deliveries_due ON webhook_deliveries (due_at);
  CREATE INDEX webhook_deliveries_in_order ON webhook_deliveries (webhook_id, sandbox_id, id);
  -- Deliveries find their event by its id (queueing, claiming, dropping a purged one's).
  CREATE UNIQUE INDEX events_by_event_id ON events (event_id) WHERE event_id IS NOT NULL;
  `,
];

export const SCHEMA_VERSION = MIGRATIONS.length;

/** Any constant both PostgresCatalog and PostgresCluster use: "Warr" in ASCII. */
const MIGRATION_LOCK = 0x5761_7272;

/**
 * Brings the database to SCHEMA_VERSION in one transaction holding an advisory lock, so
 * that nodes and gateways starting together migrate it exactly once: the others wait for
 * the lock, then find the steps done. A database from a newer Warren is refused untouched.
 */
export async function migrate(client: pg.ClientBase, where: string): Promise<void> {
  await client.query("BEGIN");
  try {
    await client.query("SELECT pg_advisory_xact_lock($1)", [MIGRATION_LOCK]);
    await client.query(`
      CREATE TABLE IF NOT EXISTS warren_schema (
        version INTEGER PRIMARY KEY,
        applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
      )`);
    const { rows } = await client.query<{ version: number | null }>(
      "SELECT max(version) AS version FROM warren_schema",
    );
    const version = rows[0]?.version ?? 0;
    if (version > SCHEMA_VERSION) {
      throw new WarrenError(
        "internal",
        `catalog ${where} has schema version ${version}, newer than the ${SCHEMA_VERSION} this ` +
          "Warren knows; upgrade Warren or point it at another database",
      );
    }
    for (let v = version; v < SCHEMA_VERSION; v++) {
      await client.query(MIGRATIONS[v] as string);
      await client.query("INSERT INTO warren_schema (version) VALUES ($1)", [v + 1]);
    }
    await client.query("COMMIT");
  } catch (err) {
    await client.query("ROLLBACK").catch(() => {});
    throw err;
  }
}
