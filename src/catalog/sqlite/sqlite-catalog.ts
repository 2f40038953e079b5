import { randomUUID } from "node:crypto";
import { closeSync, mkdirSync, openSync } from "node:fs";
import { dirname } from "node:path";
import Database from "better-sqlite3";
import { toWarrenError, WarrenError } from "../../shared/index.js";
import {
  type BuildRow,
  type Catalog,
  type EventRow,
  type LifecycleEventQuery,
  type LifecycleEventRow,
  REQUIRED_SANDBOX_KEYS,
  type SandboxPatch,
  type SandboxRow,
  type SandboxState,
  type SnapshotRow,
  type TagRow,
  type TeamAdmit,
  type TemplateRow,
} from "../catalog.js";
import { checkLifecycleQuery, typesFilter } from "../lifecycle-query.js";
import type { SecretCatalog } from "../secrets.js";
import { AdmissionRefused, admitOrRefuse, toTeamUsage } from "../team-admission.js";
import type { TeamCatalog } from "../teams.js";
import type { VolumeCatalog } from "../volumes.js";
import type { WebhookCatalog } from "../webhooks.js";
import { checkVersion, migrate } from "./migrations.js";
import {
  buildParams,
  type SandboxRecord,
  sandboxParams,
  snapshotParams,
  templateParams,
  toBuildRow,
  toEventRow,
  toLifecycleEventRow,
  toSandboxRow,
  toSnapshotRow,
  toTagRow,
  toTemplateRow,
} from "./rows.js";
import { SqliteSecrets } from "./sqlite-secrets.js";
import { SqliteTeams } from "./sqlite-teams.js";
import { SqliteVolumes } from "./sqlite-volumes.js";
import { SqliteWebhooks } from "./sqlite-webhooks.js";
import { prepareStatements, type Statements } from "./statements.js";

const BUSY_TIMEOUT_MS = 5_000;

/**
 * The catalog in one SQLite file, for a single node. better-sqlite3 is synchronous: each
 * method does its work before returning a settled Promise, so calls never interleave.
 */
export class SqliteCatalog implements Catalog {
  readonly #db: Database.Database;
  readonly #sql: Statements;
  /** Teams and their keys, in the same file. */
  readonly teams: TeamCatalog;
  readonly volumes: VolumeCatalog;
  readonly secrets: SecretCatalog;
  readonly webhooks: WebhookCatalog;

  private constructor(db: Database.Database) {
    this.#db = db;
    this.#sql = prepareStatements(db);
    this.teams = new SqliteTeams(db, (context, work) => this.#run(context, work));
    this.volumes = new SqliteVolumes(db, (context, work) => this.#run(context, work));
    this.secrets = new SqliteSecrets(db, (context, work) => this.#run(context, work));
    this.webhooks = new SqliteWebhooks(db, (context, work) => this.#run(context, work));
  }

  /** Opens (creating if needed, with its directory) and migrates the catalog file at `path`. */
  static async open(path: string): Promise<SqliteCatalog> {
    let db: Database.Database | undefined;
    try {
      if (path !== ":memory:") {
        mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
        // Created here rather than by SQLite so that it is 0600: rows hold access tokens.
        closeSync(openSync(path, "a", 0o600));
      }
      db = new Database(path, { timeout: BUSY_TIMEOUT_MS });
      db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
      // Before any pragma that writes, so a file from a newer Warren is left as it was.
      checkVersion(db, path);
      db.pragma("foreign_keys = ON");
      // Deleted and overwritten values are zeroed rather than left in free space: rows hold
      // access tokens and env vars, which purgeKilledSecrets must really remove from the file.
      db.pragma("secure_delete = ON");
      db.pragma("journal_mode = WAL");
      // With WAL, NORMAL loses at most the last commits on power loss, never consistency.
      db.pragma("synchronous = NORMAL");
      migrate(db, path);
      return new SqliteCatalog(db);
    } catch (err) {
      db?.close();
      throw toWarrenError(err, `open catalog ${path}`);
    }
  }

  insertSandbox(row: SandboxRow, admit?: TeamAdmit): Promise<void> {
    return this.#run(`insert sandbox ${row.id}`, () => {
      this.#db
        .transaction(() => {
          if (admit) this.#admit(admit, row.teamId, row.id);
          this.#sql.insertSandbox.run(sandboxParams(row));
        })
        .immediate();
    });
  }

  updateSandbox(
    id: string,
    patch: SandboxPatch,
    admit?: TeamAdmit,
  ): Promise<SandboxRow | undefined> {
    return this.#run(`update sandbox ${id}`, () => {
      for (const key of REQUIRED_SANDBOX_KEYS) {
        if (key in patch && patch[key] === undefined) {
          throw new WarrenError("invalid_argument", `${key} cannot be cleared`);
        }
      }
      return this.#db
        .transaction(() => {
          const current = this.#sql.getSandbox.get(id);
          if (!current) return undefined;
          if (admit) this.#admit(admit, current.team_id, id);
          // Spreading keeps keys set to undefined, which is how a patch clears a column.
          const next = {
            ...toSandboxRow(current),
            ...patch,
            id,
            updatedAt: new Date().toISOString(),
          };
          this.#sql.updateSandbox.run(sandboxParams(next));
          return toSandboxRow(this.#sql.getSandbox.get(id) as SandboxRecord);
        })
        .immediate();
    });
  }

  getSandbox(id: string): Promise<SandboxRow | undefined> {
    return this.#run(`get sandbox ${id}`, () => {
      const record = this.#sql.getSandbox.get(id);
      return record && toSandboxRow(record);
    });
  }

  findSandbox(id: string): Promise<SandboxRow | undefined> {
    return this.getSandbox(id);
  }

  listSandboxes(states?: readonly SandboxState[]): Promise<SandboxRow[]> {
    return this.#run("list sandboxes", () => {
      const records = states
        ? this.#sql.listSandboxesIn.all(JSON.stringify(states))
        : this.#sql.listSandboxes.all();
      return records.map(toSandboxRow);
    });
  }

  deleteSandbox(id: string): Promise<void> {
    return this.#run(`delete sandbox ${id}`, () => {
      this.#sql.deleteSandbox.run(id);
    });
  }

  purgeKilledSecrets(killedBefore: string): Promise<number> {
    return this.#run("purge killed sandboxes' secrets", () => {
      const { changes } = this.#sql.purgeKilledSecrets.run({ killedBefore });
      // secure_delete has zeroed the old values in the pages; the checkpoint writes those
      // pages into the file and empties the WAL, which still held the old page images.
      if (changes > 0) this.#db.pragma("wal_checkpoint(TRUNCATE)");
      return changes;
    });
  }

  putTemplate(row: TemplateRow): Promise<void> {
    return this.#run(`put template ${row.id}`, () => {
      this.#db
        .transaction(() => {
          this.#sql.putTemplate.run(templateParams(row));
          this.#sql.clearAliases.run(row.id);
          const namespace = row.teamId ?? "";
          row.aliases.forEach((alias, position) => {
            this.#sql.putAlias.run({ namespace, alias, id: row.id, position });
          });
        })
        .immediate();
    });
  }

  getTemplate(idOrAlias: string, teamId?: string): Promise<TemplateRow | undefined> {
    return this.#run(`get template ${idOrAlias}`, () => {
      const record = this.#sql.getTemplate.get({ key: idOrAlias, team: teamId ?? null });
      return record && toTemplateRow(record);
    });
  }

  listTemplates(): Promise<TemplateRow[]> {
    return this.#run("list templates", () => this.#sql.listTemplates.all().map(toTemplateRow));
  }

  deleteTemplate(id: string): Promise<void> {
    // Its aliases go with it: ON DELETE CASCADE.
    return this.#run(`delete template ${id}`, () => {
      this.#sql.deleteTemplate.run(id);
    });
  }

  putBuild(row: BuildRow): Promise<void> {
    return this.#run(`put build ${row.id}`, () => {
      this.#sql.putBuild.run(buildParams(row));
    });
  }

  getBuild(id: string): Promise<BuildRow | undefined> {
    return this.#run(`get build ${id}`, () => {
      const record = this.#sql.getBuild.get(id);
      return record && toBuildRow(record);
    });
  }

  listBuilds(templateId?: string): Promise<BuildRow[]> {
    return this.#run("list builds", () =>
      this.#sql.listBuilds.all({ templateId: templateId ?? null }).map(toBuildRow),
    );
  }

  deleteBuild(id: string): Promise<void> {
    return this.#run(`delete build ${id}`, () => {
      this.#sql.deleteBuild.run(id);
    });
  }

  putTag(row: TagRow): Promise<void> {
    return this.#run(`put tag ${row.templateId}:${row.tag}`, () => {
      this.#sql.putTag.run({ ...row });
    });
  }

  getTag(templateId: string, tag: string): Promise<TagRow | undefined> {
    return this.#run(`get tag ${templateId}:${tag}`, () => {
      const record = this.#sql.getTag.get({ templateId, tag });
      return record && toTagRow(record);
    });
  }

  listTags(templateId: string): Promise<TagRow[]> {
    return this.#run(`list tags of ${templateId}`, () =>
      this.#sql.listTags.all(templateId).map(toTagRow),
    );
  }

  deleteTag(templateId: string, tag: string): Promise<void> {
    return this.#run(`delete tag ${templateId}:${tag}`, () => {
      this.#sql.deleteTag.run({ templateId, tag });
    });
  }

  putSnapshot(row: SnapshotRow): Promise<void> {
    return this.#run(`put snapshot ${row.id}`, () => {
      this.#sql.putSnapshot.run(snapshotParams(row));
    });
  }

  getSnapshot(id: string): Promise<SnapshotRow | undefined> {
    return this.#run(`get snapshot ${id}`, () => {
      const record = this.#sql.getSnapshot.get(id);
      return record && toSnapshotRow(record);
    });
  }

  listSnapshots(filter: { sandboxId?: string; name?: string } = {}): Promise<SnapshotRow[]> {
    return this.#run("list snapshots", () =>
      this.#sql.listSnapshots
        .all({ sandboxId: filter.sandboxId ?? null, name: filter.name ?? null })
        .map(toSnapshotRow),
    );
  }

  deleteSnapshot(id: string): Promise<void> {
    return this.#run(`delete snapshot ${id}`, () => {
      this.#sql.deleteSnapshot.run(id);
    });
  }

  snapshotUsers(
    id: string,
  ): Promise<{ snapshots: string[]; templates: string[]; sandboxes: string[] }> {
    return this.#run(`find users of snapshot ${id}`, () => ({
      snapshots: this.#sql.childSnapshots.all(id),
      templates: this.#sql.snapshotTemplates.all(id),
      sandboxes: this.#sql.snapshotSandboxes.all(id),
    }));
  }

  recordEvent(event: EventRow): Promise<void> {
    return this.#run(`record event ${event.kind} of ${event.sandboxId}`, () => {
      const eventId = event.lifecycle === undefined ? null : randomUUID();
      this.#db.transaction(() => {
        this.#sql.insertEvent.run({
          sandboxId: event.sandboxId,
          at: event.at,
          kind: event.kind,
          detail: event.detail === undefined ? null : JSON.stringify(event.detail),
          lifecycle: event.lifecycle ?? null,
          eventId,
        });
        if (eventId !== null) this.#sql.enqueueDeliveries.run(eventId);
      })();
    });
  }

  listLifecycleEvents(query: LifecycleEventQuery): Promise<LifecycleEventRow[]> {
    return this.#run(`list lifecycle events of team ${query.teamId ?? "(any)"}`, () => {
      checkLifecycleQuery(query);
      const types = typesFilter(query);
      const { teamId, sandboxId, ascending } = query;
      return this.#sql
        .listLifecycleEvents({
          ascending,
          team: teamId !== undefined,
          sandbox: sandboxId !== undefined,
        })
        .all({
          ...(teamId !== undefined && { teamId }),
          ...(sandboxId !== undefined && { sandboxId }),
          types: types && JSON.stringify(types),
          limit: query.limit,
          offset: query.offset,
        })
        .map(toLifecycleEventRow);
    });
  }

  purgeEvents(before: string): Promise<number> {
    return this.#run("purge events", () =>
      this.#db.transaction(() => {
        const { changes } = this.#sql.purgeEvents.run(before);
        this.#sql.purgeDeliveries.run();
        return changes;
      })(),
    );
  }

  listEvents(
    sandboxId: string,
    options: { since?: string; limit?: number } = {},
  ): Promise<EventRow[]> {
    return this.#run(`list events of ${sandboxId}`, () => {
      const { since, limit } = options;
      if (limit !== undefined && !(Number.isSafeInteger(limit) && limit >= 0)) {
        throw new WarrenError("invalid_argument", `limit must be an integer >= 0, got ${limit}`);
      }
      // SQLite reads a negative LIMIT as "no limit".
      const params = { sandboxId, since: since ?? null, limit: limit ?? -1 };
      return this.#sql.listEvents.all(params).map(toEventRow);
    });
  }

  async close(): Promise<void> {
    if (this.#db.open) this.#db.close();
  }

  /** Runs synchronous work as a settled Promise, turning SQLite failures into WarrenErrors. */
  /** One process writes this database: the transaction alone serializes admissions. */
  #admit(admit: TeamAdmit, teamId: string, sandboxId: string): void {
    admitOrRefuse(admit, toTeamUsage(this.#sql.teamUsage.get(teamId, sandboxId)));
  }

  #run<T>(context: string, work: () => T): Promise<T> {
    try {
      if (!this.#db.open) throw new WarrenError("unavailable", "the catalog is closed");
      return Promise.resolve(work());
    } catch (err) {
      return Promise.reject(toCatalogError(err, context));
    }
  }
}

function toCatalogError(err: unknown, context: string): WarrenError {
  if (err instanceof AdmissionRefused) return toWarrenError(err.refusal, context);
  if (err instanceof WarrenError) {
    return new WarrenError(err.reason, `${context}: ${err.message}`, { cause: err });
  }
  const code = (err as { code?: unknown } | undefined)?.code;
  const message = `${context}: ${err instanceof Error ? err.message : String(err)}`;
  if (code === "SQLITE_CONSTRAINT_PRIMARYKEY" || code === "SQLITE_CONSTRAINT_UNIQUE") {
    return new WarrenError("already_exists", message, { cause: err });
  }
  if (code === "SQLITE_BUSY") return new WarrenError("unavailable", message, { cause: err });
  if (code === "SQLITE_FULL")
    return new WarrenError("insufficient_storage", message, { cause: err });
  return toWarrenError(err, context);
}
