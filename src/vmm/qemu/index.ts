export { type AccelProbeResult, probeAccelerator } from "./accel.js";
export { type AccelChoice, type AccelChoiceOptions, chooseAccelerator } from "./accel-choice.js";
export {
  QemuDriver,
  type QemuDriverOptions,
  qemuVersion,
  type VmmUser,
} from "./driver.js";
export { enableKsm } from "./memory-merge.js";
export { QmpClient, type QmpEvent } from "./qmp-client.js";
