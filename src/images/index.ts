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
export {
  type BasicCredentials,
  type CredentialExchangeOptions,
  exchangeRegistryCredentials,
  formatImageReference,
  type ImageReference,
  type ImageRunConfig,
  OCI_ROOTFS_RECIPE,
  type PulledImage,
  type PullImageOptions,
  parseImageReference,
  pullImage,
  type RegistryCredentials,
  type RegistryEndpointOptions,
} from "./oci/index.js";
export type { ProgressSink } from "./progress.js";
export { ensureHostSetup, type HostSetupOptions } from "./setup.js";
