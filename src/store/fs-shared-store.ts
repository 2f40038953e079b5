import { constants } from "node:fs";
import { link, mkdir, open, readdir, readFile, rename, rm, stat, unlink } from "node:fs/promises";
import { join } from "node:path";
import { toWarrenError, WarrenError } from "../shared/index.js";
import {
  downloadVerified,
  forEachLimit,
  fsyncDir,
  openLocalFile,
  tempBeside,
  writeVerified,
} from "./local-files.js";
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

/** Files copied or fetched at once: a snapshot has a handful, two of them big. */
const CONCURRENCY = 2;

/**
 * Wraps a failure of the shared filesystem: full or forbidden say so, anything else (an NFS
 * server gone, a stale handle) is the store being unavailable.
 */
function storeError(err: unknown, context: string): WarrenError {
  if (err instanceof WarrenError) return err;
  const code = (err as NodeJS.ErrnoException).code;
  if (code === "ENOSPC" || code === "EDQUOT" || code === "EACCES" || code === "EPERM")
    return toWarrenError(err, context);
  const detail = err instanceof Error ? err.message : String(err);
  return new WarrenError("store_unavailable", `${context}: ${detail}`, { cause: err });
}

function isMissing(err: unknown): boolean {
  return (err as NodeJS.ErrnoException).code === "ENOENT";
}

/**
 * A shared store on a filesystem every node mounts (NFS, CephFS, ...): `<root>/manifests/<id>.json`
 * and `<root>/files/<id>/<name>`. Every file is written under a dot-named temporary and renamed
 * (a manifest is linked, so two publishers of one id cannot both win), each synced first.
 */
export class FsSharedStore implements SharedStore {
  readonly #manifests: string;
  readonly #files: string;

  constructor(readonly root: string) {
    this.#manifests = join(root, "manifests");
    this.#files = join(root, "files");
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
    const dir = join(this.#files, id);
    try {
      await mkdir(dir, { recursive: true, mode: 0o700 });
      await forEachLimit(files, CONCURRENCY, (file) => this.#copyIn(localDir, dir, file));
      await fsyncDir(dir);
    } catch (err) {
      throw storeError(err, `publishing snapshot ${id} to ${this.root}`);
    }
    const manifest = { id, files: [...files], publishedAt: new Date().toISOString() };
    const won = await this.#writeManifest(manifest);
    return won ? manifest : this.#alreadyPublished(await this.#mustManifest(id), files);
  }

  async manifest(id: string): Promise<SnapshotManifest | undefined> {
    assertId(id);
    let text: string;
    try {
      text = await readFile(this.#manifestPath(id), "utf8");
    } catch (err) {
      if (isMissing(err)) return undefined;
      throw storeError(err, `reading the manifest of snapshot ${id}`);
    }
    return parseManifest(text, id);
  }

  async fetch(id: string, intoDir: string): Promise<SnapshotManifest> {
    const manifest = await this.manifest(id);
    if (!manifest) throw notPublished(id);
    await downloadVerified(
      manifest,
      intoDir,
      async (file) => {
        const path = join(this.#files, id, file.name);
        const handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW).catch(
          (err: unknown) => {
            throw isMissing(err)
              ? new WarrenError("snapshot_tampered", `${path} is missing from the shared store`)
              : storeError(err, `reading ${path}`);
          },
        );
        return handle.createReadStream({ highWaterMark: 1 << 20 });
      },
      CONCURRENCY,
    );
    return manifest;
  }

  async delete(id: string): Promise<void> {
    assertId(id);
    try {
      await rm(this.#manifestPath(id), { force: true });
      await fsyncDir(this.#manifests).catch((err: unknown) => {
        if (!isMissing(err)) throw err;
      });
      await rm(join(this.#files, id), { recursive: true, force: true });
    } catch (err) {
      throw storeError(err, `deleting snapshot ${id} from ${this.root}`);
    }
  }

  async list(): Promise<string[]> {
    const names = await readdir(this.#manifests).catch((err: unknown) => {
      if (isMissing(err)) return [] as string[];
      throw storeError(err, `listing ${this.#manifests}`);
    });
    return names
      .filter((name) => name.endsWith(".json"))
      .map((name) => name.slice(0, -".json".length))
      .filter(isValidId)
      .sort();
  }

  async sweep(olderThanMs = DEFAULT_SWEEP_AGE_MS): Promise<number> {
    const cutoff = Date.now() - olderThanMs;
    const old = async (path: string) =>
      (await stat(path).catch(() => undefined))?.mtimeMs ?? Number.POSITIVE_INFINITY;
    let swept = 0;
    try {
      for (const name of await readdir(this.#manifests).catch(() => [] as string[]))
        if (name.startsWith(".") && (await old(join(this.#manifests, name))) <= cutoff)
          await rm(join(this.#manifests, name), { force: true });
      const published = new Set(await this.list());
      for (const id of await readdir(this.#files).catch(() => [] as string[])) {
        const dir = join(this.#files, id);
        const entries = await readdir(dir).catch(() => [] as string[]);
        const ages = await Promise.all([dir, ...entries.map((e) => join(dir, e))].map(old));
        if (!published.has(id)) {
          // Nothing of a publish in flight is older than the cutoff: it writes as it goes.
          if (Math.max(...ages) > cutoff) continue;
          await rm(dir, { recursive: true, force: true });
          swept += 1;
          continue;
        }
        const temps = entries.filter((e, i) => e.startsWith(".") && (ages[i + 1] ?? 0) <= cutoff);
        for (const temp of temps) await rm(join(dir, temp), { force: true });
        if (temps.length > 0) swept += 1;
      }
    } catch (err) {
      throw storeError(err, `sweeping ${this.root}`);
    }
    return swept;
  }

  async close(): Promise<void> {}

  #manifestPath(id: string): string {
    return join(this.#manifests, `${id}.json`);
  }

  async #mustManifest(id: string): Promise<SnapshotManifest> {
    const manifest = await this.manifest(id);
    if (!manifest) throw new WarrenError("store_unavailable", `manifest of ${id} vanished`);
    return manifest;
  }

  #alreadyPublished(existing: SnapshotManifest, files: readonly StoreFile[]): SnapshotManifest {
    if (sameFiles(existing.files, files)) return existing;
    throw new WarrenError(
      "already_exists",
      `snapshot ${existing.id} is already published with other files (ids are immutable)`,
    );
  }

  /** Copies one file in under a temporary name, checked against its record, then renames it. */
  async #copyIn(localDir: string, dir: string, file: StoreFile): Promise<void> {
    const handle = await openLocalFile(localDir, file);
    const dest = join(dir, file.name);
    const temp = tempBeside(dest, "tmp");
    try {
      const source = handle.createReadStream({ autoClose: false, highWaterMark: 1 << 20 });
      const path = join(localDir, file.name);
      await writeVerified(source, temp, file, `${path} (being published)`, (err) =>
        toWarrenError(err, `reading ${path}`),
      );
      await rename(temp, dest);
    } catch (err) {
      await rm(temp, { force: true });
      throw err;
    } finally {
      await handle.close();
    }
  }

  /** Writes the manifest unless one exists; false when another publisher's got there first. */
  async #writeManifest(manifest: SnapshotManifest): Promise<boolean> {
    const path = this.#manifestPath(manifest.id);
    const temp = tempBeside(path, "tmp");
    try {
      await mkdir(this.#manifests, { recursive: true, mode: 0o700 });
      const handle = await open(temp, "wx", 0o600);
      try {
        await handle.writeFile(serializeManifest(manifest));
        await handle.sync();
      } finally {
        await handle.close();
      }
      // link() fails on an existing name where rename() would replace it: the first one wins.
      const won = await link(temp, path).then(
        () => true,
        (err: unknown) => {
          if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
          throw err;
        },
      );
      await fsyncDir(this.#manifests);
      return won;
    } catch (err) {
      throw storeError(err, `writing the manifest of snapshot ${manifest.id}`);
    } finally {
      await unlink(temp).catch(() => {});
    }
  }
}
