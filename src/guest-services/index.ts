export { GuestServices, type GuestServicesOptions, type Listen, type ServedSlot } from "./host.js";
export type { ServicesLaunch } from "./launch.js";
