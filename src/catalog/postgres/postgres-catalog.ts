import { randomUUID } from "node:crypto";
import type { PoolClient } from "pg";
import { WarrenError } from "../../shared/index.js";
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
  type TemplateKind,
  type TemplateRow,
} from "../catalog.js";
import { checkLifecycleQuery, typesFilter } from "../lifecycle-query.js";
import type { SecretCatalog } from "../secrets.js";
import { admitOrRefuse, toTeamUsage, type UsageRecord } from "../team-admission.js";
import type { TeamCatalog } from "../teams.js";
import type { VolumeCatalog } from "../volumes.js";
import type { WebhookCatalog } from "../webhooks.js";
import { CatalogPool, type PoolOptions, rowsOf } from "./pool.js";
import { PostgresSecrets } from "./postgres-secrets.js";
import { PostgresTeams } from "./postgres-teams.js";
import { PostgresVolumes } from "./postgres-volumes.js";
import { PostgresWebhooks } from "./postgres-webhooks.js";
import {
  type BuildRecord,
  type EventRecord,
  type LifecycleEventRecord,
  type SandboxRecord,
  type SnapshotRecord,
  sandboxParams,
  type TagRecord,
  type TemplateRecord,
  toBuildRow,
  toEventRow,
  toLifecycleEventRow,
  toSandboxRow,
  toSnapshotRow,
  toTagRow,
  toTemplateRow,
} from "./rows.js";
import { SQL } from "./statements.js";

/**
 * Team admission inside a transaction: the team's lock (held to its end, so concurrent
 * admissions of one team on any node go one at a time), then its usage on every node.
 */
async function admitTeam(
  client: PoolClient,
  admit: TeamAdmit,
  teamId: string,
  sandboxId: string,
): Promise<void> {
  await client.query(SQL.lockTeam, [teamId]);
  const [usage] = await rowsOf<UsageRecord>(client, SQL.teamUsage, [teamId, sandboxId]);
  admitOrRefuse(admit, toTeamUsage(usage));
}

export interface PostgresCatalogOptions extends PoolOptions {
  /**
   * The node this catalog serves: its sandboxes, snapshots and local templates are the
   * rows carrying this id (README: "Node scoping"). Stable across the node's restarts.
   */
  readonly nodeId: string;
}

/** Kinds each node makes for itself; the others have one row for the whole cluster. */
const NODE_LOCAL_KINDS: ReadonlySet<TemplateKind> = new Set(["base", "layer"]);

/**
 * The catalog in a PostgreSQL database shared by many nodes, each seeing its own: what the
 * orchestrator of one node reads and writes looks like a private catalog, while builds,
 * tags, events, global templates and other nodes' snapshots are shared.
 */
export class PostgresCatalog implements Catalog {
  readonly #db: CatalogPool;
  readonly #node: string;
  /** Teams and their keys: the cluster's, not this node's. */
  readonly teams: TeamCatalog;
  readonly volumes: VolumeCatalog;
  readonly secrets: SecretCatalog;
  readonly webhooks: WebhookCatalog;

  private constructor(db: CatalogPool, nodeId: string) {
    this.#db = db;
    this.#node = nodeId;
    this.teams = new PostgresTeams(db);
    this.volumes = new PostgresVolumes(db);
    this.secrets = new PostgresSecrets(db);
    this.webhooks = new PostgresWebhooks(db);
  }

  /** Connects (a bounded pool) and migrates the database, once across nodes opening at once. */
  static async open(options: PostgresCatalogOptions): Promise<PostgresCatalog> {
    if (typeof options.nodeId !== "string" || options.nodeId === "") {
      throw new WarrenError("invalid_argument", "nodeId must be a non-empty string");
    }
    return new PostgresCatalog(await CatalogPool.open(options), options.nodeId);
  }

  get nodeId(): string {
    return this.#node;
  }

  async insertSandbox(row: SandboxRow, admit?: TeamAdmit): Promise<void> {
    const params = [this.#node, row.id, ...sandboxParams(row)];
    const context = `insert sandbox ${row.id}`;
    if (!admit) {
      await this.#db.query(context, SQL.insertSandbox, params);
      return;
    }
    await this.#db.transaction(context, async (client) => {
      await admitTeam(client, admit, row.teamId, row.id);
      await client.query(SQL.insertSandbox, params);
    });
  }

  updateSandbox(
    id: string,
    patch: SandboxPatch,
    admit?: TeamAdmit,
  ): Promise<SandboxRow | undefined> {
    for (const key of REQUIRED_SANDBOX_KEYS) {
      if (key in patch && patch[key] === undefined) {
        return Promise.reject(
          new WarrenError("invalid_argument", `update sandbox ${id}: ${key} cannot be cleared`),
        );
      }
    }
    return this.#db.transaction(`update sandbox ${id}`, async (client) => {
      const [current] = await rowsOf<SandboxRecord>(client, SQL.lockSandbox, [this.#node, id]);
      if (!current) return undefined;
      if (admit) await admitTeam(client, admit, current.team_id, id);
      // Spreading keeps keys set to undefined, which is how a patch clears a column.
      const next = { ...toSandboxRow(current), ...patch, id, updatedAt: new Date().toISOString() };
      const [updated] = await rowsOf<SandboxRecord>(client, SQL.updateSandbox, [
        this.#node,
        id,
        ...sandboxParams(next),
      ]);
      return updated && toSandboxRow(updated);
    });
  }

  async getSandbox(id: string): Promise<SandboxRow | undefined> {
    const [record] = await this.#db.query<SandboxRecord>(`get sandbox ${id}`, SQL.getSandbox, [
      this.#node,
      id,
    ]);
    return record && toSandboxRow(record);
  }

  async findSandbox(id: string): Promise<SandboxRow | undefined> {
    const [record] = await this.#db.query<SandboxRecord>(`find sandbox ${id}`, SQL.findSandbox, [
      id,
    ]);
    return record && toSandboxRow(record);
  }

  async listSandboxes(states?: readonly SandboxState[]): Promise<SandboxRow[]> {
    const records = await this.#db.query<SandboxRecord>("list sandboxes", SQL.listSandboxes, [
      this.#node,
      states ?? null,
    ]);
    return records.map(toSandboxRow);
  }

  async deleteSandbox(id: string): Promise<void> {
    await this.#db.query(`delete sandbox ${id}`, SQL.deleteSandbox, [this.#node, id]);
  }

  async purgeKilledSecrets(killedBefore: string): Promise<number> {
    const purged = await this.#db.query("purge killed sandboxes' secrets", SQL.purgeKilledSecrets, [
      this.#node,
      killedBefore,
    ]);
    return purged.length;
  }

  putTemplate(row: TemplateRow): Promise<void> {
    const scope = NODE_LOCAL_KINDS.has(row.kind) ? this.#node : "";
    return this.#db.transaction(`put template ${row.id}`, async (client) => {
      await client.query(SQL.dropTemplateElsewhere, [this.#node, row.id, scope]);
      await client.query(SQL.putTemplate, [
        scope,
        row.id,
        row.kind,
        row.snapshotId,
        row.vcpus,
        row.memoryMiB,
        row.diskSizeMiB,
        row.createdAt,
        JSON.stringify(row.config ?? {}),
        row.teamId ?? null,
      ]);
      await client.query(SQL.clearAliases, [scope, row.id]);
      // Once each: an alias given twice would be upserted twice in one statement.
      await client.query(SQL.putAliases, [
        scope,
        row.id,
        [...new Set(row.aliases)],
        row.teamId ?? "",
      ]);
    });
  }

  async getTemplate(idOrAlias: string, teamId?: string): Promise<TemplateRow | undefined> {
    const [record] = await this.#db.query<TemplateRecord>(
      `get template ${idOrAlias}`,
      SQL.getTemplate,
      [this.#node, idOrAlias, teamId ?? null],
    );
    return record && toTemplateRow(record);
  }

  async listTemplates(): Promise<TemplateRow[]> {
    const records = await this.#db.query<TemplateRecord>("list templates", SQL.listTemplates, [
      this.#node,
    ]);
    return records.map(toTemplateRow);
  }

  async deleteTemplate(id: string): Promise<void> {
    // Its aliases go with it: ON DELETE CASCADE.
    await this.#db.query(`delete template ${id}`, SQL.deleteTemplate, [this.#node, id]);
  }

  async putBuild(row: BuildRow): Promise<void> {
    await this.#db.query(`put build ${row.id}`, SQL.putBuild, [
      row.id,
      row.templateId,
      row.name,
      JSON.stringify(row.tags),
      row.status,
      row.vcpus,
      row.memoryMiB,
      row.diskSizeMiB,
      row.snapshotId ?? null,
      JSON.stringify(row.layers),
      row.reason === undefined ? null : JSON.stringify(row.reason),
      row.createdAt,
      row.updatedAt,
      row.finishedAt ?? null,
      row.teamId,
    ]);
  }

  async getBuild(id: string): Promise<BuildRow | undefined> {
    const [record] = await this.#db.query<BuildRecord>(`get build ${id}`, SQL.getBuild, [id]);
    return record && toBuildRow(record);
  }

  async listBuilds(templateId?: string): Promise<BuildRow[]> {
    const records = await this.#db.query<BuildRecord>("list builds", SQL.listBuilds, [
      templateId ?? null,
    ]);
    return records.map(toBuildRow);
  }

  async deleteBuild(id: string): Promise<void> {
    await this.#db.query(`delete build ${id}`, SQL.deleteBuild, [id]);
  }

  async putTag(row: TagRow): Promise<void> {
    await this.#db.query(`put tag ${row.templateId}:${row.tag}`, SQL.putTag, [
      row.templateId,
      row.tag,
      row.buildId,
      row.createdAt,
    ]);
  }

  async getTag(templateId: string, tag: string): Promise<TagRow | undefined> {
    const [record] = await this.#db.query<TagRecord>(`get tag ${templateId}:${tag}`, SQL.getTag, [
      templateId,
      tag,
    ]);
    return record && toTagRow(record);
  }

  async listTags(templateId: string): Promise<TagRow[]> {
    const records = await this.#db.query<TagRecord>(`list tags of ${templateId}`, SQL.listTags, [
      templateId,
    ]);
    return records.map(toTagRow);
  }

  async deleteTag(templateId: string, tag: string): Promise<void> {
    await this.#db.query(`delete tag ${templateId}:${tag}`, SQL.deleteTag, [templateId, tag]);
  }

  async putSnapshot(row: SnapshotRow): Promise<void> {
    await this.#db.query(`put snapshot ${row.id}`, SQL.putSnapshot, [
      this.#node,
      row.id,
      row.dir,
      row.sandboxId ?? null,
      row.parentId ?? null,
      row.kind,
      JSON.stringify(row.names),
      row.imagesFingerprint,
      row.createdAt,
      row.files ? JSON.stringify(row.files) : null,
    ]);
  }

  /** Any node's: a sandbox or template made elsewhere restores from its published files. */
  async getSnapshot(id: string): Promise<SnapshotRow | undefined> {
    const [record] = await this.#db.query<SnapshotRecord>(`get snapshot ${id}`, SQL.getSnapshot, [
      id,
    ]);
    return record && toSnapshotRow(record, this.#node);
  }

  async listSnapshots(filter: { sandboxId?: string; name?: string } = {}): Promise<SnapshotRow[]> {
    const records = await this.#db.query<SnapshotRecord>("list snapshots", SQL.listSnapshots, [
      this.#node,
      filter.sandboxId ?? null,
      filter.name ?? null,
    ]);
    return records.map((record) => toSnapshotRow(record, this.#node));
  }

  async deleteSnapshot(id: string): Promise<void> {
    await this.#db.query(`delete snapshot ${id}`, SQL.deleteSnapshot, [this.#node, id]);
  }

  /** Users on every node: a snapshot another node still needs is never reported unused. */
  async snapshotUsers(
    id: string,
  ): Promise<{ snapshots: string[]; templates: string[]; sandboxes: string[] }> {
    const context = `find users of snapshot ${id}`;
    const ids = async (sql: string) =>
      (await this.#db.query<{ id: string }>(context, sql, [id])).map((r) => r.id);
    const [snapshots, templates, sandboxes] = await Promise.all([
      ids(SQL.childSnapshots),
      ids(SQL.snapshotTemplates),
      ids(SQL.snapshotSandboxes),
    ]);
    return { snapshots, templates, sandboxes };
  }

  async recordEvent(event: EventRow): Promise<void> {
    await this.#db.query(`record event ${event.kind} of ${event.sandboxId}`, SQL.insertEvent, [
      event.sandboxId,
      event.at,
      event.kind,
      event.detail === undefined ? null : JSON.stringify(event.detail),
      event.lifecycle ?? null,
      event.lifecycle === undefined ? null : randomUUID(),
    ]);
  }

  async listLifecycleEvents(query: LifecycleEventQuery): Promise<LifecycleEventRow[]> {
    const context = `list lifecycle events of team ${query.teamId ?? "(any)"}`;
    try {
      checkLifecycleQuery(query);
    } catch (err) {
      throw new WarrenError("invalid_argument", `${context}: ${(err as Error).message}`);
    }
    const records = await this.#db.query<LifecycleEventRecord>(
      context,
      query.ascending ? SQL.listLifecycleEventsOldestFirst : SQL.listLifecycleEventsNewestFirst,
      [
        query.teamId ?? null,
        query.sandboxId ?? null,
        typesFilter(query),
        query.limit,
        query.offset,
      ],
    );
    return records.map(toLifecycleEventRow);
  }

  async purgeEvents(before: string): Promise<number> {
    const [purged] = await this.#db.query<{ n: string }>("purge events", SQL.purgeEvents, [before]);
    return Number(purged?.n ?? 0);
  }

  async listEvents(
    sandboxId: string,
    options: { since?: string; limit?: number } = {},
  ): Promise<EventRow[]> {
    const { since, limit } = options;
    if (limit !== undefined && !(Number.isSafeInteger(limit) && limit >= 0)) {
      throw new WarrenError(
        "invalid_argument",
        `list events of ${sandboxId}: limit must be an integer >= 0, got ${limit}`,
      );
    }
    const records = await this.#db.query<EventRecord>(
      `list events of ${sandboxId}`,
      SQL.listEvents,
      [sandboxId, since ?? null, limit ?? null],
    );
    return records.map(toEventRow);
  }

  close(): Promise<void> {
    return this.#db.close();
  }
}
