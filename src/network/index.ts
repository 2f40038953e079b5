export { type CommandResult, type CommandRunner, runCommand } from "./command-runner.js";
export {
  DEFAULT_EGRESS_POLICY,
  type EgressPolicy,
  NEVER_RANGES,
  PRIVATE_RANGES,
  sameEgressPolicy,
  validateEgressPolicy,
} from "./egress-policy.js";
export { EgressPolicyError, NetworkError, SlotTakenError } from "./errors.js";
export { NetworkSlot } from "./network-slot.js";
export {
  DEFAULT_BASE_CIDR,
  GATEWAY_ADDRESS,
  GUEST_ADDRESS,
  GUEST_MAC,
  TAP_MAC,
  TAP_NAME,
} from "./slot-addressing.js";
export { type NetworkLogger, SlotPool, type SlotPoolOptions } from "./slot-pool.js";
export type { StaleCleanupReport } from "./stale-cleanup.js";
