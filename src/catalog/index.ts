export type {
  BuildRow,
  BuildStatus,
  Catalog,
  EventRow,
  LifecycleEventQuery,
  LifecycleEventRow,
  SandboxPatch,
  SandboxRow,
  SandboxState,
  SnapshotFileRecord,
  SnapshotRow,
  TagRow,
  TeamAdmit,
  TeamUsage,
  TemplateKind,
  TemplateRow,
} from "./catalog.js";
export { HOLDING_STATES, REQUIRED_SANDBOX_KEYS } from "./catalog.js";
export type {
  ClusterCatalog,
  ClusterSandboxRow,
  DownNode,
  NodeCapacity,
  NodeLoad,
  NodeRegistration,
  NodeRow,
  NodeState,
  SandboxLocation,
} from "./cluster.js";
export { LOST_EVENT } from "./cluster.js";
export type { PoolOptions as PostgresOptions } from "./postgres/pool.js";
export { PostgresCatalog, type PostgresCatalogOptions } from "./postgres/postgres-catalog.js";
export { PostgresCluster } from "./postgres/postgres-cluster.js";
export type { SecretCatalog, SecretRow } from "./secrets.js";
export { SqliteCatalog } from "./sqlite/sqlite-catalog.js";
export {
  type ApiKeyRow,
  DEFAULT_TEAM_ID,
  type KeyMask,
  TEAM_LIMIT_KEYS,
  type TeamCatalog,
  type TeamLimits,
  type TeamRow,
} from "./teams.js";
export type { VolumeCatalog, VolumeRow } from "./volumes.js";
export type {
  DeliveryOutcome,
  WebhookCatalog,
  WebhookDelivery,
  WebhookPatch,
  WebhookRow,
} from "./webhooks.js";
