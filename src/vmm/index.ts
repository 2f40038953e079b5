export type { DiskChains, FlattenPlan } from "./disk-chains.js";
export type {
  Accelerator,
  ExitInfo,
  GuestImages,
  LeftoverVm,
  MachineShape,
  PreparedRestore,
  ReattachedVm,
  SnapshotFile,
  SnapshotTiming,
  Vm,
  VmmDriver,
  VmNetwork,
  VmSpec,
} from "./driver.js";
export { QmpError, SnapshotMismatchError, SnapshotTamperedError, VmmError } from "./errors.js";
export type { DiskBacking, SnapshotFileRef, SnapshotMeta } from "./qemu/snapshot-meta.js";
