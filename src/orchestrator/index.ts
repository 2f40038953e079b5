export { BASE_TEMPLATE } from "./base-template.js";
export type { CapacityLimits } from "./capacity.js";
export { EnvdClient } from "./envd-client.js";
export type { GuestAgent, InitOptions } from "./guest-agent.js";
export { ensureLayout, type StateLayout, stateLayout } from "./layout.js";
export { Orchestrator, type OrchestratorOptions } from "./orchestrator.js";
export { assertReady } from "./readiness.js";
export type * from "./types.js";
export type { PoolSettings } from "./warm-pool.js";
