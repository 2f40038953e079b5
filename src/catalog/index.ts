export type {
  BuildRow,
  BuildStatus,
  Catalog,
  EventRow,
  SandboxPatch,
  SandboxRow,
  SandboxState,
  SnapshotFileRecord,
  SnapshotRow,
  TagRow,
  TemplateKind,
  TemplateRow,
} from "./catalog.js";
export { REQUIRED_SANDBOX_KEYS } from "./catalog.js";
export { SqliteCatalog } from "./sqlite/sqlite-catalog.js";
