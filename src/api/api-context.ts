import type { TemplateBuilds } from "../builds/index.js";
import type { Webhooks } from "../events/index.js";
import type { SandboxService, ServerStatus } from "../orchestrator/index.js";
import type { Secrets } from "../secrets/index.js";
import type { TeamAdmin } from "../tenancy/index.js";
import type { Volumes } from "../volumes/index.js";

/** What every route group is handed: the service and the settings of `createApi`. */
export interface ApiContext {
  /** The node's sandboxes; throws the readiness gate's error (503) while the node starts. */
  readonly service: () => SandboxService;
  /** The node's phase (starting, ready, failed), answered even while it starts. */
  readonly status: () => ServerStatus;
  /** The template build API; throws (503) while the node starts. Absent: its routes answer 503. */
  readonly builds?: () => TemplateBuilds;
  /** Teams and keys; throws (503) while the node starts. Absent: their routes answer 503. */
  readonly teamAdmin?: () => TeamAdmin;
  /** Volumes and their files; throws (503) while the node starts. Absent: their routes answer 503. */
  readonly volumes?: () => Volumes;
  /** Secrets (values write-only); throws (503) while the node starts. Absent: their routes answer 503. */
  readonly secrets?: () => Secrets;
  readonly webhooks?: () => Webhooks;
  /** Returned as `domain` in Sandbox responses; null: the SDK uses its E2B_DOMAIN. */
  readonly domain: string | null;
  /** TTL when a create (or refresh) does not name one. */
  readonly defaultTimeoutMs: number;
  /** Largest TTL a request may ask for. */
  readonly maxTimeoutMs: number;
}
