export { BASE_TEMPLATE } from "./base-template.js";
export type { CapacityLimits } from "./capacity.js";
export { ensureLayout, type StateLayout, stateLayout } from "./layout.js";
export { Orchestrator, type OrchestratorOptions } from "./orchestrator.js";
export type * from "./types.js";
