import type {
  DeliveryOutcome,
  WebhookCatalog,
  WebhookDelivery,
  WebhookPatch,
  WebhookRow,
} from "../webhooks.js";
import { type CatalogPool, rowsOf } from "./pool.js";
import { type LifecycleEventRecord, toLifecycleEventRow } from "./rows.js";

interface WebhookRecord {
  id: string;
  team_id: string;
  name: string;
  url: string;
  enabled: boolean;
  events: string[];
  sealed_secret: string;
  created_at: Date;
  updated_at: Date;
  last_delivery: DeliveryOutcome | null;
  failures: number;
}

interface DeliveryRecord extends LifecycleEventRecord {
  delivery_id: string;
  attempts: number;
  queued_at: Date;
  webhook_id: string;
  url: string;
  sealed_secret: string;
}

const toWebhookRow = (r: WebhookRecord): WebhookRow => ({
  id: r.id,
  teamId: r.team_id,
  name: r.name,
  url: r.url,
  enabled: r.enabled,
  events: r.events,
  sealedSecret: r.sealed_secret,
  createdAt: r.created_at.toISOString(),
  updatedAt: r.updated_at.toISOString(),
  ...(r.last_delivery !== null && { lastDelivery: r.last_delivery }),
  failures: r.failures,
});

const SQL = {
  insert: `
    INSERT INTO webhooks (id, team_id, name, url, enabled, events, sealed_secret, created_at,
      updated_at)
    VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9)`,
  get: "SELECT * FROM webhooks WHERE team_id = $1 AND id = $2",
  list: "SELECT * FROM webhooks WHERE team_id = $1 ORDER BY created_at, id",
  update: `
    UPDATE webhooks SET name = COALESCE($3, name), url = COALESCE($4, url),
      enabled = COALESCE($5, enabled), events = COALESCE($6::jsonb, events),
      sealed_secret = COALESCE($7, sealed_secret), updated_at = now()
    WHERE team_id = $1 AND id = $2 RETURNING *`,
  delete: "DELETE FROM webhooks WHERE team_id = $1 AND id = $2 RETURNING id",
  // The oldest of each webhook and sandbox only, due and not leased (in order per sandbox);
  // SKIP LOCKED: nodes claiming at once each get others.
  lease: `
    WITH picked AS (
      SELECT d.id FROM webhook_deliveries d
      WHERE d.due_at <= now() AND (d.leased_until IS NULL OR d.leased_until <= now())
        AND d.id = (SELECT min(o.id) FROM webhook_deliveries o
          WHERE o.webhook_id = d.webhook_id AND o.sandbox_id = d.sandbox_id)
      ORDER BY d.due_at, d.id LIMIT $1 FOR UPDATE SKIP LOCKED
    )
    UPDATE webhook_deliveries d SET leased_until = now() + $2 * interval '1 millisecond'
    FROM picked WHERE d.id = picked.id RETURNING d.id`,
  claimed: `
    SELECT d.id AS delivery_id, d.attempts, d.queued_at, d.webhook_id, w.url,
      w.sealed_secret, e.event_id, e.at, e.kind, e.detail, e.lifecycle, e.sandbox_id,
      e.team_id, s.template_id, s.metadata, s.started_at, s.vcpus, s.memory_mib, s.snapshot_id
    FROM webhook_deliveries d
      JOIN webhooks w ON w.id = d.webhook_id
      JOIN events e ON e.event_id = d.event_id
      JOIN sandboxes s ON s.id = e.sandbox_id
    WHERE d.id = ANY ($1::bigint[]) ORDER BY d.due_at, d.id`,
  retry: `
    UPDATE webhook_deliveries SET attempts = attempts + 1, due_at = $2, leased_until = NULL
    WHERE id = $1 RETURNING webhook_id`,
  done: "DELETE FROM webhook_deliveries WHERE id = $1 RETURNING webhook_id",
  outcome: `
    UPDATE webhooks SET last_delivery = $2::jsonb,
      failures = CASE WHEN $3 THEN 0 WHEN $4 THEN failures + 1 ELSE failures END
    WHERE id = $1`,
} as const;

/**
 * A delivery of each event of `$1` (ids just recorded) for every enabled webhook of its team
 * that lists its type: run in the events' own statement or transaction.
 */
export const ENQUEUE_DELIVERIES = `
  INSERT INTO webhook_deliveries (webhook_id, event_id, sandbox_id, queued_at, due_at)
  SELECT w.id, e.event_id, e.sandbox_id, e.at, e.at
  FROM events e JOIN webhooks w ON w.team_id = e.team_id
  WHERE e.event_id = ANY ($1::text[]) AND w.enabled AND w.events ? e.lifecycle`;

/** Webhooks of every team of the cluster, and their deliveries, claimed by any node. */
export class PostgresWebhooks implements WebhookCatalog {
  readonly #db: CatalogPool;

  constructor(db: CatalogPool) {
    this.#db = db;
  }

  async insertWebhook(row: WebhookRow): Promise<void> {
    await this.#db.query(`insert webhook ${row.name}`, SQL.insert, [
      row.id,
      row.teamId,
      row.name,
      row.url,
      row.enabled,
      JSON.stringify(row.events),
      row.sealedSecret,
      row.createdAt,
      row.updatedAt,
    ]);
  }

  async getWebhook(teamId: string, id: string): Promise<WebhookRow | undefined> {
    const [record] = await this.#db.query<WebhookRecord>(`get webhook ${id}`, SQL.get, [
      teamId,
      id,
    ]);
    return record && toWebhookRow(record);
  }

  async listWebhooks(teamId: string): Promise<WebhookRow[]> {
    const records = await this.#db.query<WebhookRecord>(`list webhooks of ${teamId}`, SQL.list, [
      teamId,
    ]);
    return records.map(toWebhookRow);
  }

  async updateWebhook(
    teamId: string,
    id: string,
    patch: WebhookPatch,
  ): Promise<WebhookRow | undefined> {
    const [record] = await this.#db.query<WebhookRecord>(`update webhook ${id}`, SQL.update, [
      teamId,
      id,
      patch.name ?? null,
      patch.url ?? null,
      patch.enabled ?? null,
      patch.events ? JSON.stringify(patch.events) : null,
      patch.sealedSecret ?? null,
    ]);
    return record && toWebhookRow(record);
  }

  async deleteWebhook(teamId: string, id: string): Promise<boolean> {
    const gone = await this.#db.query(`delete webhook ${id}`, SQL.delete, [teamId, id]);
    return gone.length > 0;
  }

  claimDeliveries(limit: number, leaseMs: number): Promise<WebhookDelivery[]> {
    return this.#db.transaction("claim webhook deliveries", async (client) => {
      const leased = await rowsOf<{ id: string }>(client, SQL.lease, [limit, leaseMs]);
      if (leased.length === 0) return [];
      const records = await rowsOf<DeliveryRecord>(client, SQL.claimed, [
        leased.map((row) => row.id),
      ]);
      return records.map(toDelivery);
    });
  }

  settleDelivery(id: string, outcome: DeliveryOutcome, retryAt?: string): Promise<void> {
    return this.#db.transaction(`settle webhook delivery ${id}`, async (client) => {
      const [settled] = await rowsOf<{ webhook_id: string }>(
        client,
        retryAt === undefined ? SQL.done : SQL.retry,
        retryAt === undefined ? [id] : [id, retryAt],
      );
      if (!settled) return;
      await client.query(SQL.outcome, [
        settled.webhook_id,
        JSON.stringify(outcome),
        outcome.delivered,
        !outcome.delivered && retryAt === undefined,
      ]);
    });
  }
}

function toDelivery(r: DeliveryRecord): WebhookDelivery {
  return {
    id: String(r.delivery_id),
    attempts: r.attempts,
    queuedAt: r.queued_at.toISOString(),
    webhook: { id: r.webhook_id, teamId: r.team_id, url: r.url, sealedSecret: r.sealed_secret },
    event: toLifecycleEventRow(r),
  };
}
