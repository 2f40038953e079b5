export type { GateSupplies } from "./gate-asks.js";
export {
  type GateListen,
  GuestServices,
  type GuestServicesOptions,
  type Listen,
  type ServedSlot,
} from "./host.js";
export { MAPPED_IDS, type ServicesLaunch } from "./launch.js";
