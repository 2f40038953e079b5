import type Database from "better-sqlite3";
import { WarrenError } from "../../shared/index.js";

/**
 * Schema steps, oldest first; step i brings the file to `PRAGMA user_version` i + 1. Never
 * edit a released step: append a new one, since files in the field have already run it.
 * Tables are STRICT so a wrong type fails at write time instead of being stored as text.
 */
export const MIGRATIONS: readonly string[] = [
  `
  CREATE TABLE sandboxes (
    id TEXT PRIMARY KEY,
    template_id TEXT NOT NULL,
    alias TEXT,
    state TEXT NOT NULL,
    client_id TEXT NOT NULL,
    envd_access_token TEXT,
    traffic_access_token TEXT,
    vcpus INTEGER NOT NULL,
    memory_mib INTEGER NOT NULL,
    disk_size_mib INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    env_vars TEXT NOT NULL,
    config TEXT NOT NULL,
    started_at TEXT NOT NULL,
    end_at TEXT NOT NULL,
    snapshot_id TEXT,
    ended_reason TEXT,
    updated_at TEXT NOT NULL
  ) STRICT;
  CREATE INDEX sandboxes_by_start ON sandboxes (started_at, id);
  CREATE INDEX sandboxes_by_state ON sandboxes (state, started_at, id);
  CREATE INDEX sandboxes_by_snapshot ON sandboxes (snapshot_id) WHERE snapshot_id IS NOT NULL;

  CREATE TABLE templates (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    snapshot_id TEXT NOT NULL,
    vcpus INTEGER NOT NULL,
    memory_mib INTEGER NOT NULL,
    disk_size_mib INTEGER NOT NULL,
    created_at TEXT NOT NULL
  ) STRICT;
  CREATE INDEX templates_by_snapshot ON templates (snapshot_id);

  -- The primary key makes an alias unique; position keeps the order the template gave.
  CREATE TABLE template_aliases (
    alias TEXT PRIMARY KEY,
    template_id TEXT NOT NULL REFERENCES templates (id) ON DELETE CASCADE,
    position INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX template_aliases_by_template ON template_aliases (template_id);

  CREATE TABLE snapshots (
    id TEXT PRIMARY KEY,
    dir TEXT NOT NULL,
    sandbox_id TEXT,
    parent_id TEXT,
    kind TEXT NOT NULL,
    names TEXT NOT NULL,
    images_fingerprint TEXT NOT NULL,
    created_at TEXT NOT NULL
  ) STRICT;
  CREATE INDEX snapshots_by_creation ON snapshots (created_at, id);
  CREATE INDEX snapshots_by_sandbox ON snapshots (sandbox_id) WHERE sandbox_id IS NOT NULL;
  CREATE INDEX snapshots_by_parent ON snapshots (parent_id) WHERE parent_id IS NOT NULL;

  -- AUTOINCREMENT: ids never reused, so they order events that share a timestamp.
  CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    sandbox_id TEXT NOT NULL,
    at TEXT NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT
  ) STRICT;
  CREATE INDEX events_by_sandbox ON events (sandbox_id, at);
  `,
  `
  ALTER TABLE templates ADD COLUMN config TEXT NOT NULL DEFAULT '{}';

  CREATE TABLE builds (
    id TEXT PRIMARY KEY,
    template_id TEXT NOT NULL,
    name TEXT NOT NULL,
    tags TEXT NOT NULL,
    status TEXT NOT NULL,
    vcpus INTEGER NOT NULL,
    memory_mib INTEGER NOT NULL,
    disk_size_mib INTEGER NOT NULL,
    snapshot_id TEXT,
    layers TEXT NOT NULL,
    reason TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    finished_at TEXT
  ) STRICT;
  CREATE INDEX builds_by_template ON builds (template_id, created_at, id);

  CREATE TABLE template_tags (
    template_id TEXT NOT NULL,
    tag TEXT NOT NULL,
    build_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (template_id, tag)
  ) STRICT;
  `,
  // v3: each snapshot's sealed files and their checksums (JSON), checked before a restore.
  `
  ALTER TABLE snapshots ADD COLUMN files TEXT;
  `,
  // v4: teams and their keys (hashed); every sandbox, build and team template names its
  // team. What existed before belongs to the default team, whose keys are the key file's.
  `
  CREATE TABLE teams (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    created_at TEXT NOT NULL,
    limits TEXT NOT NULL
  ) STRICT;
  INSERT INTO teams (id, name, created_at, limits)
    VALUES ('default', 'default', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), '{}');

  CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    hash TEXT NOT NULL UNIQUE,
    mask TEXT NOT NULL,
    created_at TEXT NOT NULL,
    last_used_at TEXT
  ) STRICT;
  CREATE INDEX api_keys_by_team ON api_keys (team_id, created_at, id);

  ALTER TABLE sandboxes ADD COLUMN team_id TEXT NOT NULL DEFAULT 'default';
  ALTER TABLE builds ADD COLUMN team_id TEXT NOT NULL DEFAULT 'default';
  ALTER TABLE templates ADD COLUMN team_id TEXT;
  UPDATE templates SET team_id = 'default' WHERE kind IN ('snapshot', 'build');
  `,
  // v5: volumes, by team; a name is unique within its team.
  `
  CREATE TABLE volumes (
    id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    token TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (team_id, name)
  ) STRICT;
  `,
  // v6: secrets, by team, sealed; a name is unique within its team.
  `
  CREATE TABLE secrets (
    id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    sealed TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    UNIQUE (team_id, name)
  ) STRICT;
  `,
  // v7: template names are per team. An alias is unique within its namespace: its
  // template's team, or '' for a template without one (the global names every team sees).
  // Existing aliases keep their template's team. SQLite cannot change a primary key in
  // place: the table is made again.
  `
  CREATE TABLE template_aliases_v7 (
    namespace TEXT NOT NULL,
    alias TEXT NOT NULL,
    template_id TEXT NOT NULL REFERENCES templates (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    PRIMARY KEY (namespace, alias)
  ) STRICT;
  INSERT INTO template_aliases_v7 (namespace, alias, template_id, position)
    SELECT COALESCE(t.team_id, ''), a.alias, a.template_id, a.position
    FROM template_aliases a JOIN templates t ON t.id = a.template_id;
  DROP TABLE template_aliases;
  ALTER TABLE template_aliases_v7 RENAME TO template_aliases;
  CREATE INDEX template_aliases_by_template ON template_aliases (template_id);
  `,
  // v8: E2B's lifecycle events are history entries with a type, an id and their sandbox's
  // team (GET /events/sandboxes lists a team's); earlier entries have none and are not listed.
  `
  ALTER TABLE events ADD COLUMN lifecycle TEXT;
  ALTER TABLE events ADD COLUMN event_id TEXT;
  ALTER TABLE events ADD COLUMN team_id TEXT;
  CREATE INDEX events_by_team ON events (team_id, at, id) WHERE lifecycle IS NOT NULL;
  `,
  // v9: a team's webhooks, and the deliveries owed to them (queued with their events).
  `
  CREATE TABLE webhooks (
    id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    url TEXT NOT NULL,
    enabled INTEGER NOT NULL,
    events TEXT NOT NULL,
    sealed_secret TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    last_delivery TEXT,
    failures INTEGER NOT NULL DEFAULT 0
  ) STRICT;
  CREATE INDEX webhooks_by_team ON webhooks (team_id, created_at, id);
  CREATE TABLE webhook_deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id TEXT NOT NULL,
    sandbox_id TEXT NOT NULL,
    queued_at TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    due_at TEXT NOT NULL,
    leased_until TEXT
  ) STRICT;
  CREATE INDEX webhook_deliveries_due ON webhook_deliveries (due_at);
  CREATE INDEX webhook_deliveries_in_order ON webhook_deliveries (webhook_id, sandbox_id, id);
  -- Deliveries find their event by its id (queueing, claiming, dropping a purged one's).
  CREATE UNIQUE INDEX events_by_event_id ON events (event_id) WHERE event_id IS NOT NULL;
  `,
];

export const SCHEMA_VERSION = MIGRATIONS.length;

/** Fails on a file from a newer Warren, whose schema this code cannot read or write. */
export function checkVersion(db: Database.Database, path: string): number {
  const version = db.pragma("user_version", { simple: true }) as number;
  if (version > SCHEMA_VERSION) {
    throw new WarrenError(
      "internal",
      `catalog ${path} has schema version ${version}, newer than the ${SCHEMA_VERSION} this ` +
        "Warren knows; upgrade Warren or point it at another catalog file",
    );
  }
  return version;
}

/**
 * Brings the file to SCHEMA_VERSION in one IMMEDIATE transaction: the write lock is taken
 * before the version is read, so two processes opening a fresh file cannot both migrate it.
 */
export function migrate(db: Database.Database, path: string): void {
  db.transaction(() => {
    const version = checkVersion(db, path);
    for (let v = version; v < SCHEMA_VERSION; v++) db.exec(MIGRATIONS[v] as string);
    if (version !== SCHEMA_VERSION) db.pragma(`user_version = ${SCHEMA_VERSION}`);
  }).immediate();
}
