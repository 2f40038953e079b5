/**
 * Webhooks: a team's receivers of its lifecycle events (E2B's `/events/webhooks`), and the
 * deliveries owed to them. A delivery is queued in the same write as the event it carries
 * (`Catalog.recordEvent`, `ClusterCatalog.markDownStale`), one per enabled webhook of the
 * team that lists the event's type, so none is lost between the two; a deliverer claims the
 * due ones (each the oldest of its webhook and sandbox: in order per sandbox) and settles
 * each: gone when delivered or given up, else retried later. src/events owns the rules
 * (validation, sealing the signature secret, signing, backoff); this only stores.
 */
import type { LifecycleEventRow } from "./catalog.js";

export interface WebhookRow {
  /** A UUID. */
  readonly id: string;
  readonly teamId: string;
  readonly name: string;
  readonly url: string;
  readonly enabled: boolean;
  /** E2B lifecycle types it receives (`sandbox.lifecycle.killed`, ...). */
  readonly events: readonly string[];
  /** Its signature secret, sealed (src/secrets' SecretBox): never the secret. */
  readonly sealedSecret: string;
  readonly createdAt: string;
  readonly updatedAt: string;
  /** How its last settled delivery went. */
  readonly lastDelivery?: DeliveryOutcome;
  /** Deliveries given up since its last delivered one. */
  readonly failures: number;
}

/** One attempt's result: the receiver's status, or why there was none. */
export interface DeliveryOutcome {
  readonly at: string;
  readonly delivered: boolean;
  readonly status?: number;
  readonly error?: string;
}

export type WebhookPatch = Partial<
  Pick<WebhookRow, "name" | "url" | "enabled" | "events" | "sealedSecret">
>;

/** A queued delivery as a deliverer claims it: its webhook and the event it carries. */
export interface WebhookDelivery {
  readonly id: string;
  /** Attempts made before this one. */
  readonly attempts: number;
  readonly queuedAt: string;
  readonly webhook: Pick<WebhookRow, "id" | "teamId" | "url" | "sealedSecret">;
  readonly event: LifecycleEventRow;
}

export interface WebhookCatalog {
  insertWebhook(row: WebhookRow): Promise<void>;
  /** Another team's reads as missing. */
  getWebhook(teamId: string, id: string): Promise<WebhookRow | undefined>;
  /** A team's, oldest first. */
  listWebhooks(teamId: string): Promise<WebhookRow[]>;
  /** Applies the keys present; undefined when the team has no such webhook. */
  updateWebhook(teamId: string, id: string, patch: WebhookPatch): Promise<WebhookRow | undefined>;
  /** With its queued deliveries; false when the team had no such webhook. */
  deleteWebhook(teamId: string, id: string): Promise<boolean>;
  /**
   * Up to `limit` deliveries due now, each the oldest queued for its webhook and sandbox,
   * leased for `leaseMs` (another claim skips them until then: one deliverer each, also
   * across nodes sharing the catalog).
   */
  claimDeliveries(limit: number, leaseMs: number): Promise<WebhookDelivery[]>;
  /**
   * After an attempt: `retryAt` queues it again then (its lease ends); otherwise it is done
   * (delivered or given up) and removed. The outcome is its webhook's `lastDelivery`; a
   * give-up adds to `failures`, a delivery resets them.
   */
  settleDelivery(id: string, outcome: DeliveryOutcome, retryAt?: string): Promise<void>;
}
