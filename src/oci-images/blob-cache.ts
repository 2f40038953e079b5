import { createHash, randomBytes } from "node:crypto";
import { mkdir, open, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { WarrenError } from "../shared/index.js";
import type { Descriptor } from "./manifest.js";
import type { RegistryClient } from "./registry-client.js";

/**
 * Blobs (layers, configs) by digest: `<cache>/blobs/sha256/<hex>`, 0600 in 0700 directories
 * (root's). A blob is written to a temporary file, hashed as it arrives, and renamed into
 * place only when its size and sha256 match the descriptor, so a file in the cache is always
 * complete and verified; downloads of one digest from one repository coalesce.
 *
 * A cached blob is used for a pull only when that pull's repository (registry endpoint and
 * name) has served its bytes before (`blobs/sources/<repository id>/<hex>`, written after a
 * verified download): knowing a digest is not having the blob, so a registry that lists
 * another caller's private layer in a manifest of its own must still serve the bytes.
 */
export class BlobCache {
  readonly #dir: string;
  readonly #sources: string;
  readonly #tmp: string;
  readonly #inFlight = new Map<string, Promise<string>>();

  constructor(cacheDir: string) {
    this.#dir = join(cacheDir, "blobs", "sha256");
    this.#sources = join(cacheDir, "blobs", "sources");
    this.#tmp = join(cacheDir, "tmp");
  }

  path(digest: string): string {
    return join(this.#dir, digest.slice("sha256:".length));
  }

  /** True when the cache holds this blob and `client`'s repository has served it before. */
  async has(client: RegistryClient, blob: Descriptor): Promise<boolean> {
    const [file, source] = await Promise.all([
      stat(this.path(blob.digest)).catch(() => undefined),
      stat(this.#sourcePath(client, blob)).catch(() => undefined),
    ]);
    return file?.isFile() === true && file.size === blob.size && source !== undefined;
  }

  /** The blob's path, downloading it from `client`'s repository unless it served it before. */
  async fetch(
    client: RegistryClient,
    blob: Descriptor,
    onBytes?: (received: number) => void,
  ): Promise<string> {
    if (await this.has(client, blob)) return this.path(blob.digest);
    const key = `${client.source} ${blob.digest}`;
    const pending = this.#inFlight.get(key);
    if (pending) return pending;
    const download = this.#download(client, blob, onBytes).finally(() =>
      this.#inFlight.delete(key),
    );
    this.#inFlight.set(key, download);
    return download;
  }

  #sourcePath(client: RegistryClient, blob: Descriptor): string {
    const id = createHash("sha256").update(client.source).digest("hex").slice(0, 32);
    return join(this.#sources, id, blob.digest.slice("sha256:".length));
  }

  async #download(
    client: RegistryClient,
    blob: Descriptor,
    onBytes?: (received: number) => void,
  ): Promise<string> {
    await mkdir(this.#dir, { recursive: true, mode: 0o700 });
    await mkdir(this.#tmp, { recursive: true, mode: 0o700 });
    const temp = join(this.#tmp, `blob-${process.pid}-${randomBytes(4).toString("hex")}`);
    const hash = createHash("sha256");
    let received = 0;
    const { chunks, close } = await client.openBlob(blob);
    const file = await open(temp, "wx", 0o600);
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
      const source = this.#sourcePath(client, blob);
      await mkdir(join(source, ".."), { recursive: true, mode: 0o700 });
      await (await open(source, "w", 0o600)).close();
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
