export type {
  Catalog,
  EventRow,
  SandboxPatch,
  SandboxRow,
  SandboxRowState,
  SnapshotRow,
  TemplateRow,
} from "./catalog.js";
export { SqliteCatalog } from "./sqlite/sqlite-catalog.js";
