export { type AccelProbeResult, probeAccelerator } from "./accel.js";
export { type AccelChoice, type AccelChoiceOptions, chooseAccelerator } from "./accel-choice.js";
export { limitsFor, type VmCgroup, VmCgroups, type VmLimits } from "./cgroups.js";
export {
  createQemuDriver,
  type QemuDriverConfig,
  type QemuDriverSetup,
} from "./create-qemu-driver.js";
export { QemuDriver, type QemuDriverOptions, type QemuReattach, qemuVersion } from "./driver.js";
export {
  type HeldVmm,
  KeeperClient,
  type KeeperClientOptions,
  KeeperVmm,
} from "./keeper-client.js";
export { enableKsm } from "./memory-merge.js";
export { Qcow2DiskChains } from "./qcow2-disk-chains.js";
export { QemuProcess, spawnLocalVmm, VMM_OOM_SCORE_ADJ } from "./qemu-process.js";
export { QmpClient, type QmpEvent } from "./qmp-client.js";
export { QemuVm } from "./vm.js";
export { parseVmRecord, VM_RECORD_VERSION, type VmRecord } from "./vm-record.js";
export { VmmIdentities, type VmmIdentity } from "./vmm-ids.js";
export type { SpawnVmm, VmmProcess, VmmSpawnRequest } from "./vmm-process.js";
export { startVmmWatchdog } from "./watchdog.js";
