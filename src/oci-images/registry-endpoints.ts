import { WarrenError } from "../shared/index.js";
import { DOCKER_HUB } from "./image-reference.js";
import type { RegistryDestinations } from "./registry-http.js";

/**
 * Where pulls go and may go, from WARREN_REGISTRY_MIRRORS, WARREN_INSECURE_REGISTRIES and
 * WARREN_PRIVATE_REGISTRIES: the operator's word. Any other registry a caller names (and any
 * token realm or redirect) must be on a public address, over HTTPS.
 */
export interface RegistryEndpointOptions {
  /** Registry name (as in references: `docker.io`, `ghcr.io`) → base URL pulls go to instead. */
  readonly mirrors?: Readonly<Record<string, string>>;
  /** host[:port] of registries (or mirrors) that may be reached over plain HTTP. */
  readonly insecureRegistries?: readonly string[];
  /** host[:port] of registries that may be on loopback, private or link-local addresses. */
  readonly privateRegistries?: readonly string[];
}

/** The hosts the operator vouched for: mirrors, insecure and private registries. */
export function registryDestinations(options: RegistryEndpointOptions = {}): RegistryDestinations {
  // As a URL's `host` says it: lowercase, no default port (HTTP's for insecure, else HTTPS's).
  const asHost = (entry: string, defaultPort: string) =>
    entry.toLowerCase().replace(new RegExp(`:${defaultPort}$`), "");
  const insecure = new Set((options.insecureRegistries ?? []).map((host) => asHost(host, "80")));
  const trusted = new Set([
    ...insecure,
    ...(options.privateRegistries ?? []).map((host) => asHost(host, "443")),
  ]);
  for (const mirror of Object.values(options.mirrors ?? {})) {
    const host = URL.canParse(mirror) ? new URL(mirror).host : undefined;
    if (host) trusted.add(host.toLowerCase());
  }
  return { trusted, insecure };
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
