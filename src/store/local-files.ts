import { createHash, randomBytes } from "node:crypto";
import { constants } from "node:fs";
import { type FileHandle, lstat, mkdir, open, rename, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import type { Readable } from "node:stream";
import { toWarrenError, WarrenError } from "../shared/index.js";
import type { SnapshotManifest, StoreFile } from "./shared-store.js";

/**
 * Opens a file of a snapshot about to be published: a plain file of the recorded size (a
 * wrong size is refused before anything is uploaded). Read its streams with autoClose off.
 */
export async function openLocalFile(dir: string, file: StoreFile): Promise<FileHandle> {
  const path = join(dir, file.name);
  const handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW).catch(
    (err: unknown) => {
      throw toWarrenError(err, `opening ${path} to publish it`);
    },
  );
  const stat = await handle.stat();
  if (!stat.isFile() || stat.size !== file.bytes) {
    await handle.close();
    throw new WarrenError(
      "snapshot_tampered",
      `${path} is not a plain file of its recorded ${file.bytes} bytes: not published`,
    );
  }
  return handle;
}

/** Refuses a local file whose contents are not what is about to be published as them. */
export async function assertLocalFile(handle: FileHandle, path: string, file: StoreFile) {
  const hash = createHash("sha256");
  let bytes = 0;
  for await (const chunk of handle.createReadStream({
    start: 0,
    autoClose: false,
    highWaterMark: 1 << 20,
  })) {
    hash.update(chunk as Buffer);
    bytes += (chunk as Buffer).length;
  }
  const sha256 = hash.digest("hex");
  if (bytes !== file.bytes || sha256 !== file.sha256)
    throw new WarrenError(
      "snapshot_tampered",
      `${path} does not match its record (${bytes} bytes, sha256 ${sha256}; recorded ${file.bytes}, ${file.sha256}): not published`,
    );
}

/**
 * Streams `source` into a new file at `path` (0400 once written), hashing as it goes: more
 * bytes than expected stop the copy at once; a wrong size or checksum at the end fails it.
 * The file is synced before this returns. `label` names the file in errors; `readFailed`
 * says what a failure to read `source` is (the store's fault or the local disk's).
 */
export async function writeVerified(
  source: Readable,
  path: string,
  file: StoreFile,
  label: string,
  readFailed: (err: unknown) => WarrenError,
): Promise<void> {
  const handle = await open(path, "wx", 0o600);
  try {
    const hash = createHash("sha256");
    let bytes = 0;
    const chunks = source[Symbol.asyncIterator]();
    for (;;) {
      const next = await chunks.next().catch((err: unknown) => {
        throw readFailed(err);
      });
      if (next.done) break;
      const buffer = next.value as Buffer;
      bytes += buffer.length;
      if (bytes > file.bytes) break;
      hash.update(buffer);
      await handle.write(buffer);
    }
    const sha256 = hash.digest("hex");
    if (bytes !== file.bytes || sha256 !== file.sha256)
      throw new WarrenError(
        "snapshot_tampered",
        bytes > file.bytes
          ? `${label} is larger than its record's ${file.bytes} bytes`
          : `${label} does not match its record (${bytes} bytes, sha256 ${sha256}; recorded ${file.bytes}, ${file.sha256})`,
      );
    await handle.sync();
    await handle.chmod(0o400);
  } finally {
    source.destroy();
    await handle.close();
  }
}

/** Syncs a directory, so the names created or renamed in it survive a crash. */
export async function fsyncDir(path: string): Promise<void> {
  const handle = await open(path, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** A dot-named sibling of `path` for an atomic write: never a valid id or file name. */
export function tempBeside(path: string, suffix: string): string {
  return join(dirname(path), `.${basename(path)}.${randomBytes(6).toString("hex")}.${suffix}`);
}

/**
 * Runs `job` over `items`, at most `limit` at once. The first failure stops new jobs and is
 * thrown once the running ones have settled (so a caller's cleanup races none of them).
 */
export async function forEachLimit<T>(
  items: readonly T[],
  limit: number,
  job: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  let failure: { err: unknown } | undefined;
  const worker = async () => {
    while (!failure && next < items.length) {
      try {
        await job(items[next++] as T);
      } catch (err) {
        failure ??= { err };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (failure) throw failure.err;
}

/**
 * Downloads every file of `manifest` into a temporary directory beside `intoDir`, each checked
 * while it streams (writeVerified), then renames the directory into place: `intoDir` appears
 * complete or not at all. On any failure the temporary directory is removed.
 */
export async function downloadVerified(
  manifest: SnapshotManifest,
  intoDir: string,
  openFile: (file: StoreFile) => Promise<Readable>,
  concurrency: number,
): Promise<void> {
  const exists = await lstat(intoDir).then(
    () => true,
    () => false,
  );
  if (exists) throw new WarrenError("already_exists", `${intoDir} already exists`);
  await mkdir(dirname(intoDir), { recursive: true, mode: 0o700 });
  const temp = tempBeside(intoDir, "fetching");
  try {
    await mkdir(temp, { mode: 0o700 });
    await forEachLimit(manifest.files, concurrency, async (file) => {
      const source = await openFile(file);
      const label = `${manifest.id}/${file.name} in the shared store`;
      await writeVerified(source, join(temp, file.name), file, label, (err) =>
        err instanceof WarrenError
          ? err
          : new WarrenError("store_unavailable", `reading ${label}: ${(err as Error).message}`, {
              cause: err,
            }),
      );
    });
    await fsyncDir(temp);
    await rename(temp, intoDir);
    await fsyncDir(dirname(intoDir));
  } catch (err) {
    await rm(temp, { recursive: true, force: true });
    throw toWarrenError(err, `fetching snapshot ${manifest.id} into ${intoDir}`);
  }
}
