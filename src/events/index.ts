export { Deliverer, type DelivererOptions, RETRY_DELAYS_MS } from "./deliverer.js";
export {
  type SandboxEventJson,
  toSandboxEventJson,
  toWebhookPayload,
  type WebhookPayload,
} from "./event-body.js";
export { type PostRequest, type PostResult, postWebhook } from "./post.js";
export { webhookSignature } from "./signature.js";
export {
  MAX_WEBHOOKS_PER_TEAM,
  type WebhookInfo,
  type WebhookInput,
  Webhooks,
  type WebhooksOptions,
} from "./webhooks.js";
