export { FsSharedStore } from "./fs-shared-store.js";
export { openSharedStore, type S3ConnectionOptions } from "./open-shared-store.js";
export { type S3Credentials, S3SharedStore, type S3SharedStoreOptions } from "./s3-shared-store.js";
export {
  DEFAULT_SWEEP_AGE_MS,
  type SharedStore,
  type SnapshotManifest,
  type StoreFile,
} from "./shared-store.js";
