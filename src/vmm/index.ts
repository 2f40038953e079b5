export type {
  Accelerator,
  DiskBacking,
  ExitInfo,
  FlattenPlan,
  GuestImages,
  MachineShape,
  PreparedRestore,
  SnapshotFile,
  SnapshotFileRef,
  SnapshotMeta,
  SnapshotTiming,
  Vm,
  VmmDriver,
  VmNetwork,
  VmSpec,
} from "./driver.js";
export { QmpError, SnapshotMismatchError, SnapshotTamperedError, VmmError } from "./errors.js";
