import { isAbsolute, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { WarrenError } from "../shared/index.js";
import { FsSharedStore } from "./fs-shared-store.js";
import { S3SharedStore, type S3SharedStoreOptions } from "./s3-shared-store.js";
import type { SharedStore } from "./shared-store.js";

/** What an `s3://` spec does not say: where the server is and how to sign in. */
export type S3ConnectionOptions = Partial<Omit<S3SharedStoreOptions, "bucket" | "prefix">>;

/**
 * Opens the store a spec names: `/abs/path` or `file:///abs/path` is a shared filesystem,
 * `s3://bucket/prefix` a bucket (endpoint, region and credentials from `s3`; without
 * credentials, the AWS SDK's default chain). Anything else is `invalid_argument`.
 */
export function openSharedStore(spec: string, s3: S3ConnectionOptions = {}): SharedStore {
  const invalid = (why: string) =>
    new WarrenError("invalid_argument", `shared store '${spec}': ${why}`);
  if (spec.startsWith("s3://")) {
    const [bucket = "", ...rest] = spec.slice("s3://".length).split("/");
    if (!bucket) throw invalid("names no bucket");
    if (!s3.region) throw invalid("an S3 store needs a region");
    return new S3SharedStore({ ...s3, region: s3.region, bucket, prefix: rest.join("/") });
  }
  let path = spec;
  if (spec.startsWith("file:")) {
    try {
      path = fileURLToPath(spec);
    } catch (err) {
      throw invalid((err as Error).message);
    }
  }
  if (!isAbsolute(path)) throw invalid("expected an absolute path, file:// URL or s3:// URL");
  return new FsSharedStore(normalize(path));
}
