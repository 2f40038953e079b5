export { BASE_TEMPLATE } from "./base-template.js";
export type { CapacityLimits } from "./capacity.js";
export { DiskSpace, type DiskStats, type StatDisk, statDisk } from "./disk-space.js";
export {
  EnvdClient,
  type EnvdClientOptions,
  type EnvdRequestOptions,
  replyExcerpt,
} from "./envd-client.js";
export { EnvdGuestAgent } from "./envd-guest-agent.js";
export {
  type EventFields,
  type EventLevel,
  type EventName,
  LIFECYCLE_EVENTS,
  type LifecycleEvent,
} from "./events.js";
export type { GuestAgent, InitOptions } from "./guest-agent.js";
export { newId } from "./ids.js";
export { ensureLayout, type StateLayout, stateLayout } from "./layout.js";
export {
  type EventListener,
  type EventSource,
  LifecycleEvents,
  type LifecycleEventsOptions,
} from "./lifecycle-events.js";
export { checkNetworkRules } from "./network-config.js";
export { Orchestrator } from "./orchestrator.js";
export type { OrchestratorOptions } from "./orchestrator-options.js";
export { assertReady } from "./readiness.js";
export type { VolumeServer } from "./sandbox-vms.js";
export {
  BUILTIN_TEMPLATE_NAMES,
  lookupTemplate,
  reservedName,
  splitTag,
  visibleTo,
} from "./templates.js";
export type * from "./types.js";
export { mountedVolumeIds } from "./volume-mounts.js";
export type { PoolSettings } from "./warm-pool.js";
