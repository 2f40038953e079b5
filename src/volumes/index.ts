export { GuestIds } from "./guest-ids.js";
export type { NfsService } from "./nfs/nfs-server.js";
export { type NfsExport, serveNfsExport } from "./nfs-export.js";
export { type EntryMetadata, type VolumeEntry, VolumeFiles } from "./volume-files.js";
export { Volumes, type VolumesOptions, type VolumeWithToken } from "./volumes.js";
