import { WarrenError } from "../shared/index.js";

/**
 * One file of a snapshot with its size and SHA-256: the catalog's SnapshotFileRecord by shape
 * (store imports nothing but shared, so it names its own).
 */
export interface StoreFile {
  readonly name: string;
  readonly bytes: number;
  readonly sha256: string;
}

/**
 * What a reader sees of a published snapshot. It is written after every file, so its presence
 * means the snapshot is complete: a publish in flight is invisible.
 */
export interface SnapshotManifest {
  readonly id: string;
  readonly files: readonly StoreFile[];
  /** ISO time the publish finished. */
  readonly publishedAt: string;
}

/**
 * Snapshots shared between nodes: one publishes a snapshot directory, the others fetch it.
 * Ids are immutable: once published, an id's files never change until it is deleted.
 */
export interface SharedStore {
  /**
   * Uploads `files` of `localDir` (checked against their sizes and checksums on the way), then
   * the manifest. An id already published with the same files is a no-op returning the
   * manifest already there; with other files it is refused (`already_exists`).
   */
  publish(id: string, localDir: string, files: readonly StoreFile[]): Promise<SnapshotManifest>;
  /** The manifest of a published snapshot; undefined until its publish finished. */
  manifest(id: string): Promise<SnapshotManifest | undefined>;
  /**
   * Downloads a published snapshot into `intoDir` (which must not exist): into a temporary
   * directory beside it, each file checked against the manifest while it streams and synced,
   * then renamed into place. A mismatch is `snapshot_tampered` and leaves nothing behind.
   */
  fetch(id: string, intoDir: string): Promise<SnapshotManifest>;
  /** Unpublishes a snapshot (manifest first, so readers stop seeing it), then its files. */
  delete(id: string): Promise<void>;
  /** The ids of every published snapshot. */
  list(): Promise<string[]>;
  /**
   * Removes what interrupted publishes left (temporary files, files without a manifest) once
   * older than `olderThanMs` (a publish in flight on another node looks the same until then).
   * Returns how many snapshots' leftovers were removed.
   */
  sweep(olderThanMs?: number): Promise<number>;
  close(): Promise<void>;
}

/** How old a manifest-less upload must be before sweep() takes it for a dead publish. */
export const DEFAULT_SWEEP_AGE_MS = 24 * 60 * 60 * 1000;

/**
 * Ids and file names become object keys and path components: letters, digits, `.`, `_`, `-`,
 * starting with a letter or digit (so never `..` and never one of our dot-named temporaries).
 */
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const SHA256 = /^[0-9a-f]{64}$/;

export function assertId(id: string): void {
  if (!NAME.test(id)) throw new WarrenError("invalid_argument", `invalid snapshot id '${id}'`);
}

export function isValidId(id: string): boolean {
  return NAME.test(id);
}

/** Checks a publish's file list: valid names, each once, sizes and checksums well formed. */
export function assertFiles(files: readonly StoreFile[]): void {
  const seen = new Set<string>();
  for (const file of files) {
    if (!NAME.test(file.name) || seen.has(file.name))
      throw new WarrenError("invalid_argument", `invalid or repeated file name '${file.name}'`);
    if (!Number.isSafeInteger(file.bytes) || file.bytes < 0 || !SHA256.test(file.sha256))
      throw new WarrenError("invalid_argument", `invalid size or sha256 for '${file.name}'`);
    seen.add(file.name);
  }
}

/** True when two file lists name the same files with the same contents, in any order. */
export function sameFiles(a: readonly StoreFile[], b: readonly StoreFile[]): boolean {
  const key = (f: StoreFile) => `${f.name}\0${f.bytes}\0${f.sha256}`;
  const left = a.map(key).sort();
  const right = b.map(key).sort();
  return left.length === right.length && left.every((k, i) => k === right[i]);
}

export function serializeManifest(manifest: SnapshotManifest): string {
  return `${JSON.stringify(manifest, null, 2)}\n`;
}

/** Parses a stored manifest, refusing one that is malformed or names another id. */
export function parseManifest(text: string, id: string): SnapshotManifest {
  const broken = (why: string) =>
    new WarrenError("snapshot_tampered", `manifest of snapshot ${id} in the shared store ${why}`);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw broken("is not JSON");
  }
  const m = value as Partial<SnapshotManifest> | null;
  if (!m || m.id !== id || typeof m.publishedAt !== "string" || !Array.isArray(m.files))
    throw broken("is malformed");
  const files = m.files.map((f: Partial<StoreFile>) => ({
    name: String(f.name),
    bytes: Number(f.bytes),
    sha256: String(f.sha256),
  }));
  try {
    assertFiles(files);
  } catch {
    throw broken("lists a malformed file");
  }
  return { id, files, publishedAt: m.publishedAt };
}

/** A fetch target's refusal when the store has no manifest for `id`. */
export function notPublished(id: string): WarrenError {
  return new WarrenError("snapshot_not_found", `snapshot ${id} is not published in the store`);
}
