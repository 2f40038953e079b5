import type { RegistryCredentials } from "../oci-images/index.js";

/** An OCI image flattened into a root filesystem image, with the defaults its config sets. */
export interface PulledImage {
  /** The manifest digest: identical images share one rootfs and one booted layer. */
  readonly digest: string;
  /** ext4 image of the flattened layers (plus the `user` account). */
  readonly rootfs: string;
  readonly envVars: Readonly<Record<string, string>>;
  readonly workdir?: string;
}

/** Where `fromImage` images come from (a registry client; absent: only `e2bdev/base`). */
export interface ImageSource {
  pull(
    reference: string,
    credentials: RegistryCredentials | undefined,
    options: { onProgress: (line: string) => void; signal: AbortSignal },
  ): Promise<PulledImage>;
}
