export { type ImageRunConfig, parseImageConfig } from "./image-config.js";
export {
  formatImageReference,
  type ImageReference,
  parseImageReference,
} from "./image-reference.js";
export {
  OCI_ROOTFS_RECIPE,
  type PulledImage,
  type PullImageOptions,
  pullImage,
} from "./pull-image.js";
export type { BasicCredentials } from "./registry-client.js";
export {
  type CredentialExchangeOptions,
  exchangeRegistryCredentials,
  type RegistryCredentials,
} from "./registry-credentials.js";
export type { RegistryEndpointOptions } from "./registry-endpoints.js";
