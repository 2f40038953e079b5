export { type EntryMetadata, type VolumeEntry, VolumeFiles } from "./volume-files.js";
export { Volumes, type VolumesOptions, type VolumeWithToken } from "./volumes.js";
