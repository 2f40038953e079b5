import type Database from "better-sqlite3";
import type {
  DeliveryOutcome,
  WebhookCatalog,
  WebhookDelivery,
  WebhookPatch,
  WebhookRow,
} from "../webhooks.js";
import { type LifecycleEventRecord, toLifecycleEventRow } from "./rows.js";

interface WebhookRecord {
  id: string;
  team_id: string;
  name: string;
  url: string;
  enabled: number;
  events: string;
  sealed_secret: string;
  created_at: string;
  updated_at: string;
  last_delivery: string | null;
  failures: number;
}

interface DeliveryRecord extends LifecycleEventRecord {
  delivery_id: number;
  attempts: number;
  queued_at: string;
  webhook_id: string;
  url: string;
  sealed_secret: string;
}

const toWebhookRow = (r: WebhookRecord): WebhookRow => ({
  id: r.id,
  teamId: r.team_id,
  name: r.name,
  url: r.url,
  enabled: r.enabled === 1,
  events: JSON.parse(r.events) as string[],
  sealedSecret: r.sealed_secret,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
  ...(r.last_delivery !== null && { lastDelivery: JSON.parse(r.last_delivery) }),
  failures: r.failures,
});

function prepare(db: Database.Database) {
  const q = <R = unknown>(sql: string) => db.prepare<[Record<string, unknown>?], R>(sql);
  return {
    insert: q(`
      INSERT INTO webhooks (id, team_id, name, url, enabled, events, sealed_secret, created_at,
        updated_at, failures)
      VALUES (@id, @teamId, @name, @url, @enabled, @events, @sealedSecret, @createdAt,
        @updatedAt, 0)`),
    get: q<WebhookRecord>("SELECT * FROM webhooks WHERE team_id = @teamId AND id = @id"),
    list: q<WebhookRecord>(
      "SELECT * FROM webhooks WHERE team_id = @teamId ORDER BY created_at, id",
    ),
    update: q(`
      UPDATE webhooks SET name = @name, url = @url, enabled = @enabled, events = @events,
        sealed_secret = @sealedSecret, updated_at = @updatedAt
      WHERE team_id = @teamId AND id = @id`),
    delete: q("DELETE FROM webhooks WHERE team_id = @teamId AND id = @id"),
    // The oldest of each webhook and sandbox only, due and not leased: in order per sandbox.
    due: q<DeliveryRecord>(`
      SELECT d.id AS delivery_id, d.attempts, d.queued_at, d.webhook_id, w.url,
        w.sealed_secret, e.event_id, e.at, e.kind, e.detail, e.lifecycle, e.sandbox_id,
        e.team_id, s.template_id, s.metadata, s.started_at, s.vcpus, s.memory_mib,
        s.snapshot_id
      FROM webhook_deliveries d
        JOIN webhooks w ON w.id = d.webhook_id
        JOIN events e ON e.event_id = d.event_id
        JOIN sandboxes s ON s.id = e.sandbox_id
      WHERE d.due_at <= @now AND (d.leased_until IS NULL OR d.leased_until <= @now)
        AND d.id = (SELECT min(o.id) FROM webhook_deliveries o
          WHERE o.webhook_id = d.webhook_id AND o.sandbox_id = d.sandbox_id)
      ORDER BY d.due_at, d.id LIMIT @limit`),
    lease: q("UPDATE webhook_deliveries SET leased_until = @until WHERE id = @id"),
    retry: q(`
      UPDATE webhook_deliveries SET attempts = attempts + 1, due_at = @retryAt,
        leased_until = NULL
      WHERE id = @id RETURNING webhook_id`),
    done: q("DELETE FROM webhook_deliveries WHERE id = @id RETURNING webhook_id"),
    outcome: q(`
      UPDATE webhooks SET last_delivery = @outcome,
        failures = CASE WHEN @delivered = 1 THEN 0 WHEN @gaveUp = 1 THEN failures + 1
          ELSE failures END
      WHERE id = @webhookId`),
  };
}

/** Webhooks and their deliveries in the node's SQLite file (the catalog's connection). */
export class SqliteWebhooks implements WebhookCatalog {
  readonly #db: Database.Database;
  readonly #sql: ReturnType<typeof prepare>;
  readonly #run: <T>(context: string, work: () => T) => Promise<T>;

  constructor(db: Database.Database, run: <T>(context: string, work: () => T) => Promise<T>) {
    this.#db = db;
    this.#sql = prepare(db);
    this.#run = run;
  }

  insertWebhook(row: WebhookRow): Promise<void> {
    return this.#run(`insert webhook ${row.name}`, () => {
      this.#sql.insert.run(params(row));
    });
  }

  getWebhook(teamId: string, id: string): Promise<WebhookRow | undefined> {
    return this.#run(`get webhook ${id}`, () => {
      const record = this.#sql.get.get({ teamId, id });
      return record && toWebhookRow(record);
    });
  }

  listWebhooks(teamId: string): Promise<WebhookRow[]> {
    return this.#run(`list webhooks of ${teamId}`, () =>
      this.#sql.list.all({ teamId }).map(toWebhookRow),
    );
  }

  updateWebhook(teamId: string, id: string, patch: WebhookPatch): Promise<WebhookRow | undefined> {
    return this.#run(`update webhook ${id}`, () =>
      this.#db.transaction(() => {
        const record = this.#sql.get.get({ teamId, id });
        if (!record) return undefined;
        const next: WebhookRow = {
          ...toWebhookRow(record),
          ...patch,
          updatedAt: new Date().toISOString(),
        };
        this.#sql.update.run(params(next));
        return next;
      })(),
    );
  }

  deleteWebhook(teamId: string, id: string): Promise<boolean> {
    return this.#run(
      `delete webhook ${id}`,
      () => this.#sql.delete.run({ teamId, id }).changes > 0,
    );
  }

  claimDeliveries(limit: number, leaseMs: number): Promise<WebhookDelivery[]> {
    return this.#run("claim webhook deliveries", () =>
      this.#db.transaction(() => {
        const now = new Date();
        const until = new Date(now.getTime() + leaseMs).toISOString();
        const due = this.#sql.due.all({ now: now.toISOString(), limit });
        for (const record of due) this.#sql.lease.run({ id: record.delivery_id, until });
        return due.map(toDelivery);
      })(),
    );
  }

  settleDelivery(id: string, outcome: DeliveryOutcome, retryAt?: string): Promise<void> {
    return this.#run(`settle webhook delivery ${id}`, () =>
      this.#db.transaction(() => {
        const settled = (
          retryAt === undefined
            ? this.#sql.done.get({ id: Number(id) })
            : this.#sql.retry.get({ id: Number(id), retryAt })
        ) as { webhook_id: string } | undefined;
        if (!settled) return;
        this.#sql.outcome.run({
          webhookId: settled.webhook_id,
          outcome: JSON.stringify(outcome),
          delivered: outcome.delivered ? 1 : 0,
          gaveUp: !outcome.delivered && retryAt === undefined ? 1 : 0,
        });
      })(),
    );
  }
}

function params(row: WebhookRow): Record<string, unknown> {
  return {
    id: row.id,
    teamId: row.teamId,
    name: row.name,
    url: row.url,
    enabled: row.enabled ? 1 : 0,
    events: JSON.stringify(row.events),
    sealedSecret: row.sealedSecret,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
  };
}

function toDelivery(r: DeliveryRecord): WebhookDelivery {
  return {
    id: String(r.delivery_id),
    attempts: r.attempts,
    queuedAt: r.queued_at,
    webhook: { id: r.webhook_id, teamId: r.team_id, url: r.url, sealedSecret: r.sealed_secret },
    event: toLifecycleEventRow(r),
  };
}
