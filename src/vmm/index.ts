export type {
  Accelerator,
  ExitInfo,
  GuestImages,
  MachineShape,
  SnapshotMeta,
  SnapshotTiming,
  Vm,
  VmmDriver,
  VmNetwork,
  VmSpec,
} from "./driver.js";
export { QmpError, SnapshotMismatchError, VmmError } from "./errors.js";
