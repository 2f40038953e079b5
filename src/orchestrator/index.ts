export type { CapacityLimits } from "./capacity.js";
export { DiskSpace, type DiskStats, type StatDisk, statDisk } from "./disk-space.js";
export {
  type EventFields,
  type EventLevel,
  type EventName,
  LIFECYCLE_EVENTS,
  type LifecycleEvent,
} from "./events.js";
export {
  EnvdClient,
  type EnvdClientOptions,
  type EnvdRequestOptions,
  replyExcerpt,
} from "./guest/envd-client.js";
export { EnvdGuestAgent } from "./guest/envd-guest-agent.js";
export type { GuestAgent, InitOptions } from "./guest/guest-agent.js";
export { newId } from "./ids.js";
export { ensureLayout, type StateLayout, stateLayout } from "./layout.js";
export {
  type EventListener,
  type EventSource,
  LifecycleEvents,
  type LifecycleEventsOptions,
} from "./lifecycle-events.js";
export { Orchestrator } from "./orchestrator.js";
export type { OrchestratorOptions } from "./orchestrator-options.js";
export type { PoolSettings } from "./pool/warm-pool.js";
export { assertReady } from "./readiness.js";
export { checkNetworkRules } from "./sandboxes/network-config.js";
export type { VolumeServer } from "./sandboxes/sandbox-vms.js";
export { mountedVolumeIds } from "./sandboxes/volume-mounts.js";
export { BASE_TEMPLATE } from "./templates/base-template.js";
export {
  BUILTIN_TEMPLATE_NAMES,
  lookupTemplate,
  reservedName,
  splitTag,
  visibleTo,
} from "./templates/templates.js";
export type * from "./types.js";
