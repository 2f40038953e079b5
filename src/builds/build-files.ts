import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { createWriteStream } from "node:fs";
import {
  type FileHandle,
  mkdir,
  open,
  readdir,
  rename,
  rm,
  rmdir,
  stat,
  utimes,
} from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { DiskSpace } from "../orchestrator/index.js";
import { DEFAULT_OWNER, type Quota, WarrenError } from "../shared/index.js";

/** How long an upload link works. */
const LINK_TTL_MS = 60 * 60 * 1000;
const HASH = /^[0-9a-f]{64}$/;
/** A stored archive: `<files hash>.<sha256 of its bytes>.tar`. */
const STORED = /^([0-9a-f]{64})\.([0-9a-f]{64})\.tar$/;
const PARTIAL = /\.partial$/;
/** What names a template's directory (ids are newId()'s; names never reach here). */
const TEMPLATE_ID = /^[A-Za-z0-9_-]{1,128}$/;
/** How often a body of unknown length is checked against the disk reserve. */
const DISK_CHECK_BYTES = 32 * 1024 * 1024;

export interface BuildFilesOptions {
  /** Holds one directory per template. */
  readonly dir: string;
  /** Largest single upload. */
  readonly maxBytes: number;
  /** Bytes of all uploads held on disk, per owner (`upload bytes`). */
  readonly quota: Quota;
  /** Free-disk admission of uploads. */
  readonly disk: DiskSpace;
  /** Whose quota a template's uploads count against (its team, once there are teams). */
  readonly ownerOf?: (templateId: string) => string;
}

/** A COPY step's archive opened for a build: its bytes' digest and a handle to read it by. */
export interface OpenedArchive {
  /** SHA-256 of the archive's bytes, computed as it was uploaded. */
  readonly digest: string;
  /** Open for the build's life: a re-upload or a collection unlinks the file, not this. */
  readonly handle: FileHandle;
}

/**
 * The files COPY steps bring: one archive (the SDK's tar, usually gzipped) per template and
 * files hash, under `<dir>/<template id>/<files hash>.<sha256 of the bytes>.tar`.
 *
 * The files hash is the SDK's name for the files (a hash of `COPY src dest`, their paths,
 * modes, sizes and contents: not of the archive, so not checkable against it). It names
 * them within one template only: another template's upload under the same hash is never
 * these files, and a COPY layer's cache key carries the SHA-256 of the bytes, computed here
 * as they stream in (and checked against a Content-Digest when the client sends one).
 *
 * Upload links carry their own authorization (the SDK sends no API key with them): an HMAC
 * of the template, hash and expiry with a key that lives as long as the process. Uploads
 * count against a quota and the disk reserve; those unused for the retention are collected.
 */
export class BuildFiles {
  readonly #o: BuildFilesOptions;
  readonly #key = randomBytes(32);
  /** Partial files being written now: never collected. */
  readonly #writing = new Set<string>();

  constructor(options: BuildFilesOptions) {
    this.#o = options;
  }

  /** Whether the template has the files with `hash`; finding them counts as a use. */
  async has(templateId: string, hash: string): Promise<boolean> {
    const path = await this.#find(templateId, hash);
    if (path) await touch(path);
    return path !== undefined;
  }

  /**
   * Opens the template's archive of `hash` for a build (a use), or says it was never
   * uploaded (build_invalid naming the hash).
   */
  async open(templateId: string, hash: string): Promise<OpenedArchive> {
    const path = await this.#find(templateId, hash);
    const handle = path && (await open(path, "r").catch(() => undefined));
    if (!path || !handle) {
      throw new WarrenError(
        "build_invalid",
        `the files with hash ${hash} were never uploaded: build again to upload them`,
      );
    }
    await touch(path);
    return { digest: STORED.exec(basename(path))?.[2] ?? "", handle };
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
   * Stores an upload after checking its link; the archive appears whole or not at all, and
   * replaces an earlier upload of the same files. A declared size over the limit, the quota
   * or the disk reserve is refused before reading; a body that grows past them is cut. With
   * `contentDigest` (RFC 9530's `sha-256=:…:`), bytes that do not match it are refused.
   */
  async accept(
    templateId: string,
    hash: string,
    link: { expires?: string; signature?: string },
    body: Readable,
    options: { declaredBytes?: number; contentDigest?: string } = {},
  ): Promise<void> {
    this.#verify(templateId, hash, link);
    const dir = this.#templateDir(templateId);
    const expected = options.contentDigest && sha256Of(options.contentDigest);
    const { declaredBytes } = options;
    const owner = this.#owner(templateId);
    const { quota, disk, maxBytes } = this.#o;
    const releases: (() => void)[] = [];
    if (declaredBytes !== undefined) {
      if (declaredBytes > maxBytes) throw this.#tooLarge();
      disk.admit("storing the upload", declaredBytes);
      releases.push(quota.reserve(declaredBytes, owner));
    }
    const partial = join(dir, `.${randomBytes(6).toString("hex")}.partial`);
    this.#writing.add(partial);
    const digest = createHash("sha256");
    let size = 0;
    let checkedDiskAt = 0;
    const tooLarge = () => this.#tooLarge();
    try {
      await mkdir(dir, { recursive: true, mode: 0o700 });
      await pipeline(
        body,
        async function* (chunks: AsyncIterable<Buffer>) {
          for await (const chunk of chunks) {
            size += chunk.length;
            if (size > maxBytes) throw tooLarge();
            // Beyond what was declared (or nothing was): taken as it comes.
            const beyond = size - (declaredBytes ?? 0);
            if (beyond > 0) releases.push(quota.reserve(Math.min(beyond, chunk.length), owner));
            if (declaredBytes === undefined && size - checkedDiskAt >= DISK_CHECK_BYTES) {
              disk.admit("storing the upload");
              checkedDiskAt = size;
            }
            digest.update(chunk);
            yield chunk;
          }
        },
        createWriteStream(partial, { mode: 0o600 }),
      );
      const actual = digest.digest("hex");
      if (expected !== undefined && expected !== actual) {
        throw new WarrenError(
          "invalid_argument",
          `the upload's bytes do not match its Content-Digest (sha-256 ${expected} was sent, the bytes have ${actual}): nothing was stored`,
        );
      }
      // A shorter body than declared gives back the rest (the HTTP layer cuts a longer one).
      if (declaredBytes !== undefined && size < declaredBytes) {
        quota.release(declaredBytes - size, owner);
      }
      const earlier = await this.#stored(dir, hash);
      const target = join(dir, `${hash}.${actual}.tar`);
      await rename(partial, target);
      for (const path of earlier) if (path !== target) await this.#remove(path, owner);
      // The same bytes again replaced themselves: counted once.
      if (earlier.includes(target)) quota.release(size, owner);
    } catch (err) {
      await rm(partial, { force: true });
      for (const release of releases) release();
      throw err;
    } finally {
      this.#writing.delete(partial);
    }
  }

  /**
   * Removes what is no longer needed: uploads unused (neither uploaded, found nor opened by
   * a build) for `retentionMs`, partial files no upload is writing (a crash's), and emptied
   * template directories. A build that opened an archive keeps reading it: removing a file
   * does not close its handle.
   */
  async collect(retentionMs: number, now = Date.now()): Promise<void> {
    for (const templateId of await listDir(this.#o.dir)) {
      if (!TEMPLATE_ID.test(templateId)) continue;
      const dir = join(this.#o.dir, templateId);
      const owner = this.#owner(templateId);
      for (const name of await listDir(dir)) {
        const path = join(dir, name);
        if (PARTIAL.test(name)) {
          if (!this.#writing.has(path)) await rm(path, { force: true });
          continue;
        }
        const info = await stat(path).catch(() => undefined);
        if (info && STORED.test(name) && now - info.mtimeMs >= retentionMs) {
          await this.#remove(path, owner);
        }
      }
      await rmdir(dir).catch(() => {}); // only when empty
    }
  }

  /** Counts what is on disk against the quota again (at start, after collecting). */
  async recount(): Promise<void> {
    this.#o.quota.clear();
    for (const templateId of await listDir(this.#o.dir)) {
      if (!TEMPLATE_ID.test(templateId)) continue;
      const dir = join(this.#o.dir, templateId);
      for (const name of await listDir(dir)) {
        if (!STORED.test(name)) continue;
        const info = await stat(join(dir, name)).catch(() => undefined);
        if (info) this.#o.quota.add(info.size, this.#owner(templateId));
      }
    }
  }

  /** Removes every upload of a template (it was deleted). */
  async drop(templateId: string): Promise<void> {
    if (!TEMPLATE_ID.test(templateId)) return;
    const dir = join(this.#o.dir, templateId);
    const owner = this.#owner(templateId);
    for (const name of await listDir(dir)) {
      if (STORED.test(name)) await this.#remove(join(dir, name), owner);
    }
    await rmdir(dir).catch(() => {});
  }

  async #remove(path: string, owner: string): Promise<void> {
    const info = await stat(path).catch(() => undefined);
    if (!info) return;
    await rm(path, { force: true });
    this.#o.quota.release(info.size, owner);
  }

  async #find(templateId: string, hash: string): Promise<string | undefined> {
    if (!HASH.test(hash)) throw new WarrenError("invalid_argument", `'${hash}' is not a sha256`);
    return (await this.#stored(this.#templateDir(templateId), hash)).at(-1);
  }

  /** The archives stored for `hash` (one, or two while a re-upload replaces the first). */
  async #stored(dir: string, hash: string): Promise<string[]> {
    return (await listDir(dir))
      .filter((name) => STORED.exec(name)?.[1] === hash)
      .map((name) => join(dir, name));
  }

  #templateDir(templateId: string): string {
    if (!TEMPLATE_ID.test(templateId)) {
      throw new WarrenError("invalid_argument", `'${templateId}' is not a template id`);
    }
    return join(this.#o.dir, templateId);
  }

  #owner(templateId: string): string {
    return this.#o.ownerOf?.(templateId) ?? DEFAULT_OWNER;
  }

  #tooLarge(): WarrenError {
    return new WarrenError(
      "payload_too_large",
      `the upload is larger than ${this.#o.maxBytes} bytes (WARREN_BUILD_UPLOAD_LIMIT_MIB)`,
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

/**
 * The hex SHA-256 a `Content-Digest` header (RFC 9530: `sha-256=:<base64>:`, maybe among
 * other algorithms) states, or undefined when it states none; a malformed one is refused.
 */
export function sha256Of(header: string): string | undefined {
  const member = /(?:^|,)\s*sha-256=([^,]*)/.exec(header);
  if (!member) return undefined;
  const value = /^:([A-Za-z0-9+/]+={0,2}):\s*$/.exec(member[1] ?? "");
  const bytes = value?.[1] ? Buffer.from(value[1], "base64") : undefined;
  if (bytes?.length !== 32) {
    throw new WarrenError(
      "invalid_argument",
      "Content-Digest: sha-256 must be 32 bytes in base64 between colons (RFC 9530)",
    );
  }
  return bytes.toString("hex");
}

function basename(path: string): string {
  return path.slice(path.lastIndexOf("/") + 1);
}

async function listDir(dir: string): Promise<string[]> {
  return (await readdir(dir).catch(() => [] as string[])).sort();
}

/** Marks a use: collection goes by the last one. */
async function touch(path: string): Promise<void> {
  const now = new Date();
  await utimes(path, now, now).catch(() => {});
}
