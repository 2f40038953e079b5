import { createHash, randomBytes } from "node:crypto";
import { mkdir, open, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { WarrenError } from "../shared/index.js";
import type { Descriptor } from "./manifest.js";
import type { RegistryClient } from "./registry-client.js";

/**
 * Blobs (layers, configs) by digest: `<cache>/blobs/sha256/<hex>`. A blob is written to a
 * temporary file, hashed as it arrives, and renamed into place only when its size and sha256
 * match the descriptor, so a file in the cache is always complete and verified; an image that
 * shares a layer with another downloads it once. Downloads of one digest coalesce.
 */
export class BlobCache {
  readonly #dir: string;
  readonly #tmp: string;
  readonly #inFlight = new Map<string, Promise<string>>();

  constructor(cacheDir: string) {
    this.#dir = join(cacheDir, "blobs", "sha256");
    this.#tmp = join(cacheDir, "tmp");
  }

  path(digest: string): string {
    return join(this.#dir, digest.slice("sha256:".length));
  }

  /** True when the cache holds this blob (verified when it was written). */
  async has(blob: Descriptor): Promise<boolean> {
    const st = await stat(this.path(blob.digest)).catch(() => undefined);
    return st?.isFile() === true && st.size === blob.size;
  }

  /** The blob's path, downloading it first when missing. */
  async fetch(
    client: RegistryClient,
    blob: Descriptor,
    onBytes?: (received: number) => void,
  ): Promise<string> {
    if (await this.has(blob)) return this.path(blob.digest);
    const pending = this.#inFlight.get(blob.digest);
    if (pending) return pending;
    const download = this.#download(client, blob, onBytes).finally(() =>
      this.#inFlight.delete(blob.digest),
    );
    this.#inFlight.set(blob.digest, download);
    return download;
  }

  async #download(
    client: RegistryClient,
    blob: Descriptor,
    onBytes?: (received: number) => void,
  ): Promise<string> {
    await mkdir(this.#dir, { recursive: true });
    await mkdir(this.#tmp, { recursive: true });
    const temp = join(this.#tmp, `blob-${process.pid}-${randomBytes(4).toString("hex")}`);
    const hash = createHash("sha256");
    let received = 0;
    const { chunks, close } = await client.openBlob(blob);
    const file = await open(temp, "wx", 0o644);
    try {
      for await (const chunk of chunks) {
        received += chunk.byteLength;
        if (received > blob.size) {
          throw new WarrenError(
            "image_pull_failed",
            `blob ${blob.digest} is longer than the ${blob.size} bytes its manifest says`,
          );
        }
        hash.update(chunk);
        await file.write(chunk);
        onBytes?.(received);
      }
      const digest = `sha256:${hash.digest("hex")}`;
      if (received !== blob.size || digest !== blob.digest) {
        throw new WarrenError(
          "image_pull_failed",
          `blob ${blob.digest} arrived as ${received} bytes with digest ${digest} (expected ${blob.size} bytes)`,
        );
      }
      await file.sync();
      await file.close();
      await rename(temp, this.path(blob.digest));
      return this.path(blob.digest);
    } catch (err) {
      await file.close().catch(() => {});
      await rm(temp, { force: true });
      throw err;
    } finally {
      close();
    }
  }
}
