import type { FileHandle } from "node:fs/promises";
import { join } from "node:path";
import { Readable } from "node:stream";
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  ListObjectsV2Command,
  type ListObjectsV2CommandOutput,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
  UploadPartCommand,
} from "@aws-sdk/client-s3";
import { WarrenError } from "../shared/index.js";
import { assertLocalFile, downloadVerified, forEachLimit, openLocalFile } from "./local-files.js";
import {
  assertFiles,
  assertId,
  DEFAULT_SWEEP_AGE_MS,
  isValidId,
  notPublished,
  parseManifest,
  type SharedStore,
  type SnapshotManifest,
  type StoreFile,
  sameFiles,
  serializeManifest,
} from "./shared-store.js";

const MiB = 1024 * 1024;
/** S3's smallest part (all but the last) and most parts per upload. */
const MIN_PART_BYTES = 5 * MiB;
const MAX_PARTS = 10_000;

export interface S3Credentials {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly sessionToken?: string;
}

export interface S3SharedStoreOptions {
  /** An S3-compatible server's URL (MinIO, Ceph RGW, ...); AWS's own endpoint when absent. */
  readonly endpoint?: string;
  readonly region: string;
  readonly bucket: string;
  /** Key prefix every object lives under, e.g. `warren/`; "" for the bucket's root. */
  readonly prefix: string;
  /** `endpoint/bucket/key` rather than `bucket.endpoint/key`: most S3-compatible servers need it. */
  readonly forcePathStyle?: boolean;
  /** Static credentials; the AWS SDK's default chain (env, profile, SSO, IMDS) when absent. */
  readonly credentials?: S3Credentials;
  /**
   * Files larger than this are uploaded in parts of this size (each read into memory, so a
   * part can be signed and retried): at least 5 MiB, S3's minimum. Default 16 MiB.
   */
  readonly partSizeBytes?: number;
  /** Parts of one file uploaded at once (memory: this × partSizeBytes). Default 4. */
  readonly partConcurrency?: number;
}

function isNotFound(err: unknown): boolean {
  return err instanceof S3ServiceException && err.$metadata.httpStatusCode === 404;
}

/** Another publisher's manifest is already there (If-None-Match failed, or raced it). */
function isPreconditionFailed(err: unknown): boolean {
  const status = err instanceof S3ServiceException ? err.$metadata.httpStatusCode : undefined;
  return status === 412 || status === 409;
}

/**
 * A shared store in an S3 bucket: `<prefix>manifests/<id>.json` and `<prefix>files/<id>/<name>`.
 * A file is one PUT up to a part's size, else a multipart upload completed only once the local
 * file has been checked against its record; the manifest is PUT last, If-None-Match `*`.
 * Multipart uploads a crash abandons are not listed: give the bucket a lifecycle rule
 * (AbortIncompleteMultipartUpload).
 */
export class S3SharedStore implements SharedStore {
  readonly #s3: S3Client;
  readonly #bucket: string;
  readonly #prefix: string;
  readonly #partBytes: number;
  readonly #partConcurrency: number;

  constructor(options: S3SharedStoreOptions) {
    const { partSizeBytes = 16 * MiB, partConcurrency = 4 } = options;
    if (!options.bucket) throw new WarrenError("invalid_argument", "bucket must not be empty");
    if (!Number.isSafeInteger(partSizeBytes) || partSizeBytes < MIN_PART_BYTES)
      throw new WarrenError("invalid_argument", "partSizeBytes must be an integer ≥ 5 MiB");
    if (!Number.isSafeInteger(partConcurrency) || partConcurrency < 1)
      throw new WarrenError("invalid_argument", "partConcurrency must be an integer ≥ 1");
    this.#bucket = options.bucket;
    this.#prefix = options.prefix.replace(/^\/+/, "").replace(/\/*$/, "/").replace(/^\/$/, "");
    this.#partBytes = partSizeBytes;
    this.#partConcurrency = partConcurrency;
    this.#s3 = new S3Client({
      region: options.region,
      ...(options.endpoint ? { endpoint: options.endpoint } : {}),
      ...(options.credentials ? { credentials: options.credentials } : {}),
      forcePathStyle: options.forcePathStyle ?? false,
      // The SDK's default flexible checksums send bodies aws-chunked with a trailer, which
      // S3-compatible servers may store verbatim (s3rver does); SHA-256 checks cover integrity.
      requestChecksumCalculation: "WHEN_REQUIRED",
      responseChecksumValidation: "WHEN_REQUIRED",
      // Socket idle limit, not a total: a GiB download stays within it while bytes flow.
      requestHandler: { connectionTimeout: 10_000, requestTimeout: 120_000 },
    });
  }

  async publish(
    id: string,
    localDir: string,
    files: readonly StoreFile[],
  ): Promise<SnapshotManifest> {
    assertId(id);
    assertFiles(files);
    const existing = await this.manifest(id);
    if (existing) return this.#alreadyPublished(existing, files);
    // One file at a time: its parts are the parallelism (and the memory bound).
    for (const file of files) await this.#upload(id, localDir, file);
    const manifest = { id, files: [...files], publishedAt: new Date().toISOString() };
    const key = this.#manifestKey(id);
    try {
      await this.#s3.send(
        new PutObjectCommand({
          Bucket: this.#bucket,
          Key: key,
          Body: serializeManifest(manifest),
          ContentType: "application/json",
          IfNoneMatch: "*",
        }),
      );
      return manifest;
    } catch (err) {
      if (!isPreconditionFailed(err)) throw this.#error(err, "PUT", key);
    }
    const theirs = await this.manifest(id);
    if (!theirs) throw new WarrenError("store_unavailable", `manifest of ${id} vanished`);
    return this.#alreadyPublished(theirs, files);
  }

  async manifest(id: string): Promise<SnapshotManifest | undefined> {
    assertId(id);
    const key = this.#manifestKey(id);
    let text: string;
    try {
      const reply = await this.#s3.send(new GetObjectCommand({ Bucket: this.#bucket, Key: key }));
      text = (await reply.Body?.transformToString("utf8")) ?? "";
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw this.#error(err, "GET", key);
    }
    return parseManifest(text, id);
  }

  async fetch(id: string, intoDir: string): Promise<SnapshotManifest> {
    const manifest = await this.manifest(id);
    if (!manifest) throw notPublished(id);
    await downloadVerified(manifest, intoDir, (file) => this.#download(id, file), 2);
    return manifest;
  }

  async delete(id: string): Promise<void> {
    assertId(id);
    const key = this.#manifestKey(id);
    try {
      await this.#s3.send(new DeleteObjectCommand({ Bucket: this.#bucket, Key: key }));
    } catch (err) {
      throw this.#error(err, "DELETE", key);
    }
    const objects = await this.#listAll(this.#fileKey(id, ""));
    await this.#deleteKeys(objects.map((o) => o.key));
  }

  async list(): Promise<string[]> {
    const base = `${this.#prefix}manifests/`;
    return (await this.#listAll(base))
      .map((o) => o.key.slice(base.length))
      .filter((name) => name.endsWith(".json"))
      .map((name) => name.slice(0, -".json".length))
      .filter(isValidId)
      .sort();
  }

  async sweep(olderThanMs = DEFAULT_SWEEP_AGE_MS): Promise<number> {
    const cutoff = Date.now() - olderThanMs;
    const base = `${this.#prefix}files/`;
    const byId = new Map<string, { keys: string[]; newest: number }>();
    for (const object of await this.#listAll(base)) {
      const id = object.key.slice(base.length).split("/")[0] ?? "";
      const entry = byId.get(id) ?? { keys: [], newest: 0 };
      entry.keys.push(object.key);
      entry.newest = Math.max(entry.newest, object.modifiedMs);
      byId.set(id, entry);
    }
    const published = new Set(await this.list());
    let swept = 0;
    for (const [id, entry] of byId) {
      if (published.has(id) || entry.newest > cutoff) continue;
      await this.#deleteKeys(entry.keys);
      swept += 1;
    }
    return swept;
  }

  async close(): Promise<void> {
    this.#s3.destroy();
  }

  #manifestKey(id: string): string {
    return `${this.#prefix}manifests/${id}.json`;
  }

  #fileKey(id: string, name: string): string {
    return `${this.#prefix}files/${id}/${name}`;
  }

  #error(err: unknown, verb: string, key: string): WarrenError {
    if (err instanceof WarrenError) return err;
    const detail = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    return new WarrenError(
      "store_unavailable",
      `${verb} s3://${this.#bucket}/${key} failed: ${detail}`,
      { cause: err },
    );
  }

  #alreadyPublished(existing: SnapshotManifest, files: readonly StoreFile[]): SnapshotManifest {
    if (sameFiles(existing.files, files)) return existing;
    throw new WarrenError(
      "already_exists",
      `snapshot ${existing.id} is already published with other files (ids are immutable)`,
    );
  }

  async #download(id: string, file: StoreFile): Promise<Readable> {
    const key = this.#fileKey(id, file.name);
    try {
      const reply = await this.#s3.send(new GetObjectCommand({ Bucket: this.#bucket, Key: key }));
      if (!(reply.Body instanceof Readable)) throw new Error("the reply has no body stream");
      return reply.Body;
    } catch (err) {
      if (isNotFound(err))
        throw new WarrenError("snapshot_tampered", `s3://${this.#bucket}/${key} is missing`);
      throw this.#error(err, "GET", key);
    }
  }

  /** Uploads one local file, checked against its record before the upload is completed. */
  async #upload(id: string, localDir: string, file: StoreFile): Promise<void> {
    const key = this.#fileKey(id, file.name);
    const handle = await openLocalFile(localDir, file);
    try {
      const checked = assertLocalFile(handle, join(localDir, file.name), file);
      const [check, upload] = await Promise.allSettled([
        checked,
        file.bytes <= this.#partBytes
          ? this.#putWhole(handle, key, file.bytes, checked)
          : this.#putParts(handle, key, file.bytes, checked),
      ]);
      if (check.status === "rejected") throw check.reason;
      if (upload.status === "rejected") throw upload.reason;
    } finally {
      await handle.close();
    }
  }

  async #putWhole(handle: FileHandle, key: string, bytes: number, checked: Promise<void>) {
    // A small file is read before it is checked: nothing reaches the store unchecked.
    const body = await readRange(handle, 0, bytes);
    await checked;
    try {
      await this.#s3.send(new PutObjectCommand({ Bucket: this.#bucket, Key: key, Body: body }));
    } catch (err) {
      throw this.#error(err, "PUT", key);
    }
  }

  async #putParts(handle: FileHandle, key: string, bytes: number, checked: Promise<void>) {
    const partBytes = Math.max(this.#partBytes, Math.ceil(bytes / MAX_PARTS));
    const target = { Bucket: this.#bucket, Key: key };
    let uploadId: string | undefined;
    try {
      ({ UploadId: uploadId } = await this.#s3.send(new CreateMultipartUploadCommand(target)));
      if (!uploadId) throw new Error("no UploadId in the reply");
      const numbers = Array.from({ length: Math.ceil(bytes / partBytes) }, (_, i) => i + 1);
      const etags: string[] = [];
      await forEachLimit(numbers, this.#partConcurrency, async (n) => {
        const start = (n - 1) * partBytes;
        const body = await readRange(handle, start, Math.min(partBytes, bytes - start));
        const reply = await this.#s3.send(
          new UploadPartCommand({ ...target, UploadId: uploadId, PartNumber: n, Body: body }),
        );
        etags[n - 1] = reply.ETag ?? "";
      });
      // Completing makes the object exist: only once the local file matched its record.
      await checked;
      await this.#s3.send(
        new CompleteMultipartUploadCommand({
          ...target,
          UploadId: uploadId,
          MultipartUpload: { Parts: numbers.map((n) => ({ PartNumber: n, ETag: etags[n - 1] })) },
        }),
      );
    } catch (err) {
      if (uploadId)
        await this.#s3
          .send(new AbortMultipartUploadCommand({ ...target, UploadId: uploadId }))
          .catch(() => {}); // Best effort: a lifecycle rule collects what is left.
      throw this.#error(err, "multipart PUT", key);
    }
  }

  async #listAll(prefix: string): Promise<{ key: string; modifiedMs: number }[]> {
    const objects: { key: string; modifiedMs: number }[] = [];
    let token: string | undefined;
    do {
      let page: ListObjectsV2CommandOutput;
      try {
        page = await this.#s3.send(
          new ListObjectsV2Command({
            Bucket: this.#bucket,
            Prefix: prefix,
            ContinuationToken: token,
          }),
        );
      } catch (err) {
        throw this.#error(err, "LIST", prefix);
      }
      for (const o of page.Contents ?? [])
        if (o.Key) objects.push({ key: o.Key, modifiedMs: o.LastModified?.getTime() ?? 0 });
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    return objects;
  }

  async #deleteKeys(keys: readonly string[]): Promise<void> {
    for (let i = 0; i < keys.length; i += 1000) {
      const batch = keys.slice(i, i + 1000).map((Key) => ({ Key }));
      try {
        const reply = await this.#s3.send(
          new DeleteObjectsCommand({ Bucket: this.#bucket, Delete: { Objects: batch } }),
        );
        const failed = reply.Errors?.[0];
        if (failed) throw new Error(`${failed.Key}: ${failed.Code} ${failed.Message}`);
      } catch (err) {
        throw this.#error(err, "DELETE", batch[0]?.Key ?? "");
      }
    }
  }
}

/** Reads `length` bytes at `start` of a local file into a new buffer. */
async function readRange(handle: FileHandle, start: number, length: number): Promise<Buffer> {
  const buffer = Buffer.allocUnsafe(length);
  let done = 0;
  while (done < length) {
    const { bytesRead } = await handle.read(buffer, done, length - done, start + done);
    if (bytesRead === 0)
      throw new WarrenError("snapshot_tampered", "a file shrank while it was being published");
    done += bytesRead;
  }
  return buffer;
}
