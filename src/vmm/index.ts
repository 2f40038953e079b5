export type {
  Accelerator,
  ExitInfo,
  GuestImages,
  MachineShape,
  PreparedRestore,
  SnapshotMeta,
  SnapshotTiming,
  Vm,
  VmmDriver,
  VmNetwork,
  VmSpec,
} from "./driver.js";
export { QmpError, SnapshotMismatchError, VmmError } from "./errors.js";
