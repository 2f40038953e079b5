export { type CommandResult, type CommandRunner, runCommand } from "./command-runner.js";
export { type Resolve, resolverAt } from "./egress-gate/decide.js";
export {
  type HeaderRule,
  SecretHostRefusedError,
  secretsNamed,
  validateHeaderRules,
} from "./egress-gate/header-rules.js";
export type { GateInterception } from "./egress-gate/intercept.js";
export {
  DEFAULT_EGRESS_POLICY,
  type EgressPolicy,
  LINK_LOCAL_RANGE,
  NEVER_RANGES,
  PRIVATE_RANGES,
  sameEgressPolicy,
  validateEgressPolicy,
} from "./egress-policy.js";
export { EgressPolicyError, NetworkError, SlotTakenError } from "./errors.js";
export { listenInNamespace } from "./listen-in-namespace.js";
export { NetnsSlotPool, type NetnsSlotPoolOptions } from "./netns-slot-pool.js";
export { NetworkSlot } from "./network-slot.js";
export { DEFAULT_BASE_CIDR, TAP_NAME } from "./slot-addressing.js";
export {
  DEFAULT_NETWORK_PREFIX,
  DEFAULT_SLOT_NAMES,
  type SlotNames,
  slotIndexIn,
  slotNamesFor,
} from "./slot-names.js";
export type { Slot, SlotPool } from "./slot-pool.js";
export type { StaleCleanupReport } from "./stale-cleanup.js";
