import { randomUUID } from "node:crypto";
import type { WebhookCatalog, WebhookDelivery } from "../catalog/index.js";
import { WEBHOOK_HEADERS } from "../protocol/index.js";
import type { Logger } from "../shared/index.js";
import { toWebhookPayload } from "./event-body.js";
import type { PostRequest, PostResult } from "./post.js";
import { webhookSignature } from "./signature.js";

/** How soon a look follows an event recorded on this node (wake). */
const WAKE_MS = 50;

/** Waits before each retry of a delivery: ~10 min in all, then it is given up. */
export const RETRY_DELAYS_MS: readonly number[] = [5_000, 15_000, 45_000, 135_000, 405_000];

export interface DelivererOptions {
  readonly catalog: WebhookCatalog;
  /** A delivery's webhook's signature secret (Webhooks.secretOf). */
  readonly secretOf: (webhook: WebhookDelivery["webhook"]) => string;
  /** Sends one attempt (the guest services process's `post`). */
  readonly post: (request: PostRequest) => Promise<PostResult>;
  readonly privateHosts: readonly string[];
  readonly logger: Logger;
  /** Between looks for due deliveries when there were none. Default 1 s. */
  readonly pollMs?: number;
  /** Attempts under way at once. Default 8. */
  readonly concurrency?: number;
  /** One attempt's bound. Default 10 s. */
  readonly timeoutMs?: number;
  readonly retryDelaysMs?: readonly number[];
}

/**
 * Sends the deliveries the catalog queued with their events: each POSTed with E2B's headers
 * and signature, a 2xx delivered, anything else retried (RETRY_DELAYS_MS) and then given up,
 * its webhook's `lastDelivery` and `failures` saying how it went. A sandbox's events reach a
 * webhook in order (the catalog hands out each one's oldest only); a claim is a lease, so a
 * deliverer that dies mid-attempt leaves it to the next look, here or on another node: at
 * least once, the event `id` to tell repeats. Never blocks a sandbox operation: its only
 * tie to them is the catalog's queue.
 */
export class Deliverer {
  readonly #o: DelivererOptions;
  #timer: NodeJS.Timeout | undefined;
  /** When the next look is due (epoch ms); undefined while one runs. */
  #nextAt: number | undefined;
  #running: Promise<void> | undefined;
  #stopped = false;

  constructor(options: DelivererOptions) {
    this.#o = options;
  }

  start(): void {
    this.#schedule(0);
  }

  /**
   * An event was just recorded here: look soon rather than at the next poll (a moment later,
   * so that its catalog write, which follows the event's listeners, is done).
   */
  wake(): void {
    if (this.#nextAt !== undefined && this.#nextAt > Date.now() + WAKE_MS) {
      clearTimeout(this.#timer);
      this.#schedule(WAKE_MS);
    }
  }

  /** No more looks; resolves once the attempts under way are settled. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#running;
  }

  /** One look: claims what is due and settles each (tests call it directly). */
  async deliverDue(): Promise<number> {
    const { catalog, logger } = this.#o;
    const concurrency = this.#o.concurrency ?? 8;
    const timeoutMs = this.#o.timeoutMs ?? 10_000;
    // The lease outlasts an attempt: a settled one is never sent twice by this node.
    const due = await catalog.claimDeliveries(concurrency, timeoutMs * 3);
    await Promise.all(
      due.map((delivery) =>
        this.#attempt(delivery, timeoutMs).catch((err: unknown) =>
          logger.warn({ err, delivery: delivery.id }, "webhook.settle_failed"),
        ),
      ),
    );
    return due.length;
  }

  #schedule(ms: number): void {
    if (this.#stopped) return;
    this.#nextAt = Date.now() + ms;
    this.#timer = setTimeout(() => {
      this.#nextAt = undefined;
      this.#running = this.deliverDue()
        .catch((err: unknown) => {
          this.#o.logger.warn({ err }, "webhook.claim_failed");
          return 0;
        })
        .then((count) => this.#schedule(count > 0 ? 0 : (this.#o.pollMs ?? 1_000)));
    }, ms).unref();
  }

  async #attempt(delivery: WebhookDelivery, timeoutMs: number): Promise<void> {
    const { catalog, logger } = this.#o;
    const body = JSON.stringify(toWebhookPayload(delivery.event));
    let secret: string;
    try {
      secret = this.#o.secretOf(delivery.webhook);
    } catch {
      // Sealed under another key (this node's changed): no attempt could ever be signed.
      const at = new Date().toISOString();
      const error = "its signature secret cannot be opened on this node: set it again";
      await catalog.settleDelivery(delivery.id, { at, delivered: false, error });
      logger.warn({ webhook: delivery.webhook.id, error }, "webhook.given_up");
      return;
    }
    const result = await this.#o.post({
      url: delivery.webhook.url,
      headers: {
        [WEBHOOK_HEADERS.webhookId]: delivery.webhook.id,
        [WEBHOOK_HEADERS.deliveryId]: randomUUID(),
        [WEBHOOK_HEADERS.signatureVersion]: "v1",
        [WEBHOOK_HEADERS.signature]: webhookSignature(secret, body),
        "user-agent": "warren-webhooks",
      },
      body,
      timeoutMs,
      privateHosts: this.#o.privateHosts,
    });
    const delivered = "status" in result && result.status >= 200 && result.status < 300;
    const outcome = {
      at: new Date().toISOString(),
      delivered,
      ...("status" in result ? { status: result.status } : { error: result.error }),
    };
    const delays = this.#o.retryDelaysMs ?? RETRY_DELAYS_MS;
    const delay = delivered ? undefined : delays[delivery.attempts];
    const retryAt = delay === undefined ? undefined : new Date(Date.now() + delay).toISOString();
    await catalog.settleDelivery(delivery.id, outcome, retryAt);
    const fields = { webhook: delivery.webhook.id, event: delivery.event.id, ...outcome };
    if (delivered) logger.debug(fields, "webhook.delivered");
    else if (retryAt) logger.info({ ...fields, retryAt }, "webhook.retrying");
    else logger.warn({ ...fields, attempts: delivery.attempts + 1 }, "webhook.given_up");
  }
}
