import { pullImage, type RegistryEndpointOptions } from "../oci-images/index.js";
import type { ImageSource, PulledImage } from "./types.js";

/**
 * `fromImage` images from registries (the oci-images component's `pullImage`): flattened once
 * per manifest digest into `cacheDir`, their config's env and workdir as the build's start.
 */
export function registryImages(
  options: RegistryEndpointOptions & { readonly cacheDir: string },
): ImageSource {
  return {
    async pull(reference, credentials, { onProgress, signal }): Promise<PulledImage> {
      const image = await pullImage({ ...options, reference, credentials, onProgress, signal });
      return {
        digest: image.digest,
        rootfs: image.rootfs,
        envVars: envMap(image.config.env),
        ...(image.config.workingDir && { workdir: image.config.workingDir }),
      };
    },
  };
}

/** `["PATH=/usr/bin", "A=b=c"]` → `{PATH: "/usr/bin", A: "b=c"}`. */
function envMap(env: readonly string[]): Record<string, string> {
  const vars: Record<string, string> = {};
  for (const entry of env) {
    const at = entry.indexOf("=");
    if (at > 0) vars[entry.slice(0, at)] = entry.slice(at + 1);
  }
  return vars;
}
