/**
 * E2B's sandbox lifecycle event types (`GET /events/sandboxes`, `/events/webhooks`): what a
 * team is told of its sandboxes' lives.
 */
export const LIFECYCLE_TYPES = [
  "sandbox.lifecycle.created",
  "sandbox.lifecycle.updated",
  "sandbox.lifecycle.paused",
  "sandbox.lifecycle.resumed",
  "sandbox.lifecycle.checkpointed",
  "sandbox.lifecycle.killed",
] as const;

export type LifecycleType = (typeof LIFECYCLE_TYPES)[number];

/** Headers of a webhook delivery, as E2B names them. */
export const WEBHOOK_HEADERS = {
  webhookId: "e2b-webhook-id",
  deliveryId: "e2b-delivery-id",
  signatureVersion: "e2b-signature-version",
  signature: "e2b-signature",
} as const;
