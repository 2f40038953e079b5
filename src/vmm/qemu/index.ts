export { type AccelProbeResult, probeAccelerator } from "./accel.js";
export {
  type PreparedRestore,
  QemuDriver,
  type QemuDriverOptions,
  qemuVersion,
  type VmmUser,
} from "./driver.js";
export { QmpClient, type QmpEvent } from "./qmp-client.js";
