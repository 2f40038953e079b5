import { WarrenError } from "../shared/index.js";
import { DOCKER_HUB } from "./image-reference.js";

/** Where pulls go, from WARREN_REGISTRY_MIRRORS and WARREN_INSECURE_REGISTRIES. */
export interface RegistryEndpointOptions {
  /** Registry name (as in references: `docker.io`, `ghcr.io`) → base URL pulls go to instead. */
  readonly mirrors?: Readonly<Record<string, string>>;
  /** host[:port] of registries (or mirrors) that may be reached over plain HTTP. */
  readonly insecureRegistries?: readonly string[];
}

/** Docker Hub's references say docker.io; its registry API answers at this host. */
const DOCKER_HUB_API = "https://registry-1.docker.io";

/**
 * The base URL of the registry API for `registry` (no trailing slash). A mirror replaces the
 * registry; plain HTTP is allowed only for hosts listed as insecure, so a typo cannot send
 * credentials in the clear.
 */
export function registryBaseUrl(registry: string, options: RegistryEndpointOptions = {}): string {
  const insecure = new Set(options.insecureRegistries ?? []);
  const mirror = options.mirrors?.[registry];
  if (mirror !== undefined) {
    let url: URL;
    try {
      url = new URL(mirror);
    } catch {
      throw new WarrenError("invalid_argument", `mirror of ${registry} is not a URL: ${mirror}`);
    }
    if (url.protocol === "http:" && !insecure.has(url.host)) {
      throw new WarrenError(
        "invalid_argument",
        `mirror ${mirror} of ${registry} is plain HTTP: list ${url.host} in WARREN_INSECURE_REGISTRIES to allow it`,
      );
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new WarrenError("invalid_argument", `mirror ${mirror} of ${registry} is not http(s)`);
    }
    return `${url.protocol}//${url.host}${url.pathname.replace(/\/+$/, "")}`;
  }
  if (registry === DOCKER_HUB) return DOCKER_HUB_API;
  return `${insecure.has(registry) ? "http" : "https"}://${registry}`;
}
