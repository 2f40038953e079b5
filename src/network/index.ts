export { type CommandResult, type RunCommand, runCommand } from "./command-runner.js";
export { hostResolve, type Resolve, resolverAt } from "./egress-gate/decide.js";
export {
  EgressGate,
  type GateListener,
  type GateSockets,
} from "./egress-gate/egress-gate.js";
export {
  type GateHost,
  type GateSlot,
  type OpenGate,
  slotLimits,
} from "./egress-gate/gate-host.js";
export {
  type HeaderRule,
  ruleFor,
  SecretHostRefusedError,
  secretsNamed,
  UnknownSecretError,
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
export { bindUdpInNamespace, listenInNamespace } from "./listen-in-namespace.js";
export { GATE_DNS_PORT, GATE_TCP_PORT } from "./netns-rules.js";
export { NetnsSlotPool, type NetnsSlotPoolOptions } from "./netns-slot-pool.js";
export { NetworkSlot } from "./network-slot.js";
export { installServicesRules, type UidRange } from "./services-rules.js";
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
