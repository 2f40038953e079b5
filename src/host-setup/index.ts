// Also used by the oci-images component: host commands and ext4 images.
export { type CommandResult, CommandRunner } from "./command.js";
export { makeExt4Image } from "./ext4-image.js";
export {
  GUEST_ARTIFACTS,
  type GuestArtifacts,
  guestArtifactPaths,
  loadGuestArtifacts,
} from "./guest-artifacts.js";
export { HOST_PACKAGES } from "./host-packages.js";
export {
  DEFAULT_DATA_DIR,
  defaultImagesDir,
  type ImagesLayout,
  imagesLayout,
} from "./layout.js";
export {
  ARTIFACT_NAMES,
  type ArtifactName,
  type ArtifactRecord,
  type Manifest,
  readManifest,
} from "./manifest.js";
export { formatDuration, type ProgressSink } from "./progress.js";
export { ensureHostSetup, type HostSetupOptions } from "./setup.js";
