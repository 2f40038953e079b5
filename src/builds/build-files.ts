import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { createWriteStream } from "node:fs";
import { access, mkdir, readFile, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { WarrenError } from "../shared/index.js";

/** How long an upload link works. */
const LINK_TTL_MS = 60 * 60 * 1000;
const HASH = /^[0-9a-f]{64}$/;

/**
 * The files COPY steps bring, one archive (the SDK's tar, usually gzipped) per files hash
 * under `<dir>/<hash>.tar`, uploaded once and reused by every build that names the hash.
 * Upload links carry their own authorization (the SDK sends no API key with them): an HMAC
 * of the template, hash and expiry with a key that lives as long as the process.
 */
export class BuildFiles {
  readonly #dir: string;
  readonly #key = randomBytes(32);
  readonly #maxBytes: number;

  constructor(dir: string, maxBytes: number) {
    this.#dir = dir;
    this.#maxBytes = maxBytes;
  }

  path(hash: string): string {
    if (!HASH.test(hash)) throw new WarrenError("invalid_argument", `'${hash}' is not a sha256`);
    return join(this.#dir, `${hash}.tar`);
  }

  async has(hash: string): Promise<boolean> {
    return access(this.path(hash)).then(
      () => true,
      () => false,
    );
  }

  read(hash: string): Promise<Buffer> {
    return readFile(this.path(hash)).catch(() => {
      throw new WarrenError(
        "build_invalid",
        `the files with hash ${hash} were never uploaded: build again to upload them`,
      );
    });
  }

  /** The query string that authorizes one upload of `hash` for `templateId`. */
  signedQuery(templateId: string, hash: string, now = Date.now()): string {
    const expires = String(now + LINK_TTL_MS);
    return new URLSearchParams({
      expires,
      signature: this.#sign(templateId, hash, expires),
    }).toString();
  }

  /**
   * Stores an upload after checking its link; the archive appears whole or not at all. A
   * declared size over the limit is refused before reading; a body that grows past it is cut.
   */
  async accept(
    templateId: string,
    hash: string,
    link: { expires?: string; signature?: string },
    body: Readable,
    declaredBytes?: number,
  ): Promise<void> {
    this.#verify(templateId, hash, link);
    if (declaredBytes !== undefined && declaredBytes > this.#maxBytes) throw this.#tooLarge();
    const target = this.path(hash);
    await mkdir(this.#dir, { recursive: true, mode: 0o700 });
    const partial = `${target}.${randomBytes(6).toString("hex")}.partial`;
    let size = 0;
    const limit = this.#maxBytes;
    const tooLarge = () => this.#tooLarge();
    try {
      await pipeline(
        body,
        async function* (chunks: AsyncIterable<Buffer>) {
          for await (const chunk of chunks) {
            size += chunk.length;
            if (size > limit) throw tooLarge();
            yield chunk;
          }
        },
        createWriteStream(partial, { mode: 0o600 }),
      );
      await rename(partial, target);
    } catch (err) {
      await rm(partial, { force: true });
      throw err;
    }
  }

  #tooLarge(): WarrenError {
    return new WarrenError(
      "payload_too_large",
      `the upload is larger than ${this.#maxBytes} bytes (WARREN_BUILD_UPLOAD_LIMIT_MIB)`,
    );
  }

  #verify(templateId: string, hash: string, link: { expires?: string; signature?: string }) {
    const expires = Number(link.expires);
    const given = Buffer.from(link.signature ?? "", "hex");
    const wanted = Buffer.from(this.#sign(templateId, hash, link.expires ?? ""), "hex");
    const valid = given.length === wanted.length && timingSafeEqual(given, wanted);
    if (!valid || !Number.isFinite(expires)) {
      throw new WarrenError("upload_link_invalid", "the upload link is not valid for this file");
    }
    if (expires < Date.now()) {
      throw new WarrenError("upload_link_invalid", "the upload link has expired: build again");
    }
  }

  #sign(templateId: string, hash: string, expires: string): string {
    return createHmac("sha256", this.#key)
      .update(`${templateId}\n${hash}\n${expires}`)
      .digest("hex");
  }
}
