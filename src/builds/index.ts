export type { LogEntry, LogLevel } from "./build-log.js";
export { registryImages } from "./registry-images.js";
export {
  type BuildRequest,
  TemplateBuilds,
  type TemplateBuildsOptions,
} from "./template-builds.js";
export type { ImageSource, PulledImage } from "./types.js";
