import { randomBytes } from "node:crypto";
import { createReadStream } from "node:fs";
import { chmod, mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { CommandRunner, formatDuration, makeExt4Image } from "../host-setup/index.js";
import { WarrenError } from "../shared/index.js";
import { BlobCache } from "./blob-cache.js";
import { type ImageRunConfig, parseImageConfig } from "./image-config.js";
import { formatImageReference, manifestSelector, parseImageReference } from "./image-reference.js";
import { ImageTree } from "./image-tree.js";
import { applyLayer } from "./layer-apply.js";
import {
  describePlatforms,
  type ImageManifest,
  parseManifest,
  selectLinuxAmd64,
} from "./manifest.js";
import { RegistryClient } from "./registry-client.js";
import {
  type CredentialExchangeOptions,
  exchangeRegistryCredentials,
  type RegistryCredentials,
} from "./registry-credentials.js";
import type { RegistryEndpointOptions } from "./registry-endpoints.js";
import { ensureGuestUser } from "./user-account.js";

/** Bumped when the rootfs made from an image changes (a new recipe rebuilds cached images). */
export const OCI_ROOTFS_RECIPE = 2;

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
const MAX_CONFIG_BYTES = 8 * MiB;

export interface PullImageOptions extends RegistryEndpointOptions {
  /** `debian:bookworm`, `ghcr.io/org/img:tag`, `host:5000/x@sha256:…`. */
  readonly reference: string;
  readonly credentials?: RegistryCredentials;
  /** Blobs, flattened rootfs images and work dirs (see README: cache layout). */
  readonly cacheDir: string;
  readonly signal?: AbortSignal;
  /** One line per step: manifest, each layer (size, cached or downloaded), unpack, ext4. */
  readonly onProgress?: (line: string) => void;
  /** Free space in the ext4 beyond the image's files (default 1024 MiB; the disk grows at boot). */
  readonly freeMiB?: number;
  /** Largest sum of compressed layer sizes accepted (default 16 GiB). */
  readonly maxDownloadBytes?: number;
  /** Largest sum of unpacked file sizes accepted (default 32 GiB). */
  readonly maxUnpackedBytes?: number;
  /** Where cloud credentials are exchanged (tests point ECR at a fake). */
  readonly credentialExchange?: CredentialExchangeOptions;
  /** Runs mkfs.ext4 (and logs it when given a log path). */
  readonly runner?: CommandRunner;
}

export interface PulledImage {
  /** Canonical reference pulled, e.g. `docker.io/library/debian:stable`. */
  readonly reference: string;
  /** Digest of the linux/amd64 image manifest: what the rootfs is cached by. */
  readonly digest: string;
  /** The flattened image as ext4 (sparse; never written to: VMs get an overlay). */
  readonly rootfs: string;
  readonly sizeMiB: number;
  /** Env, working dir, user, entrypoint and cmd from the image's config. */
  readonly config: ImageRunConfig;
}

interface RootfsRecord {
  readonly recipe: number;
  readonly digest: string;
  readonly rootfs: string;
  readonly sizeMiB: number;
  readonly config: ImageRunConfig;
}

const pullsInFlight = new Map<string, Promise<PulledImage>>();
const buildsInFlight = new Map<string, Promise<RootfsRecord>>();

/**
 * Pulls an image (linux/amd64) from a registry speaking the Docker Registry HTTP API v2 and
 * flattens it into an ext4 rootfs, with the `user` account added when missing. Cached: blobs
 * by digest, the rootfs by manifest digest; a tag is resolved with one manifest request, a
 * pinned digest already built needs none. Concurrent pulls of one image share the work; a
 * failed pull leaves no files behind. Must run as root for the image's owners to be kept.
 */
export async function pullImage(options: PullImageOptions): Promise<PulledImage> {
  const ref = parseImageReference(options.reference);
  // Callers with other credentials or endpoints must not share a pull (nor its failure).
  const key = JSON.stringify([
    formatImageReference(ref),
    options.cacheDir,
    options.credentials ?? null,
    options.mirrors?.[ref.registry] ?? null,
    options.insecureRegistries ?? [],
    options.privateRegistries ?? [],
  ]);
  const pending = pullsInFlight.get(key);
  if (pending) return pending;
  const pull = pullOnce(options).finally(() => pullsInFlight.delete(key));
  pullsInFlight.set(key, pull);
  return pull;
}

async function pullOnce(options: PullImageOptions): Promise<PulledImage> {
  const ref = parseImageReference(options.reference);
  const name = formatImageReference(ref);
  const progress = options.onProgress ?? (() => {});
  const cache = cacheLayout(options.cacheDir);
  const result = (record: RootfsRecord): PulledImage => ({
    reference: name,
    digest: record.digest,
    rootfs: join(cache.rootfsDir, record.rootfs),
    sizeMiB: record.sizeMiB,
    config: record.config,
  });
  await cache.prepare();
  const started = Date.now();
  const credentials = options.credentials
    ? await exchangeRegistryCredentials(options.credentials, {
        ...options.credentialExchange,
        ...(options.signal ? { signal: options.signal } : {}),
      })
    : undefined;
  const client = new RegistryClient(ref, {
    ...(options.mirrors ? { mirrors: options.mirrors } : {}),
    ...(options.insecureRegistries ? { insecureRegistries: options.insecureRegistries } : {}),
    ...(options.privateRegistries ? { privateRegistries: options.privateRegistries } : {}),
    ...(credentials ? { credentials } : {}),
    ...(options.signal ? { signal: options.signal } : {}),
  });
  // Every pull asks the registry for the manifest with this caller's credentials, a pinned
  // digest too: what another caller pulled is never handed out on the strength of the cache.
  const top = await client.getManifest(manifestSelector(ref));
  let parsed = parseManifest(top.body, top.contentType);
  let digest = top.digest;
  if (parsed.kind === "index") {
    const entry = selectLinuxAmd64(parsed);
    if (!entry) {
      throw new WarrenError(
        "image_platform_unsupported",
        `${name} has no linux/amd64 image (it has: ${describePlatforms(parsed)})`,
      );
    }
    const platform = await client.getManifest(entry.digest);
    parsed = parseManifest(platform.body, platform.contentType);
    digest = platform.digest;
    if (parsed.kind !== "manifest") {
      throw new WarrenError("image_invalid", `${name}: the linux/amd64 entry is another index`);
    }
  }
  const manifest = parsed;
  progress(
    `pull ${name}: manifest ${digest}, ${manifest.layers.length} layers (${formatDuration(Date.now() - started)})`,
  );
  checkBounds(manifest, name, options);
  // Blobs this repository has not served before are downloaded (and so proved) first.
  await fetchBlobs(client, manifest, name, cache, progress);
  let record = await readRecord(cache, digest);
  if (record) {
    progress(`pull ${name}: cached rootfs ${digest}`);
  } else {
    let build = buildsInFlight.get(digest);
    if (!build) {
      build = buildRootfs(manifest, digest, name, options).finally(() =>
        buildsInFlight.delete(digest),
      );
      buildsInFlight.set(digest, build);
    }
    record = await build;
  }
  return result(record);
}

/**
 * The cache's directories, 0700 and root's (the server's): unpacked images hold the
 * tenants' setuid files and private data, out of every local user's reach.
 */
async function prepareCache(cacheDir: string, dirs: readonly string[]): Promise<void> {
  for (const dir of [cacheDir, ...dirs]) {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    // Made wider by an earlier version, or by a umask: narrowed on every pull.
    await chmod(dir, 0o700);
  }
}

function checkBounds(manifest: ImageManifest, name: string, options: PullImageOptions): void {
  const maxDownload = options.maxDownloadBytes ?? 16 * GiB;
  const total = manifest.layers.reduce((sum, layer) => sum + layer.size, 0);
  if (total > maxDownload) {
    throw new WarrenError(
      "image_invalid",
      `${name}: layers total ${total} bytes, over the ${maxDownload}-byte limit`,
    );
  }
  if (manifest.config.size > MAX_CONFIG_BYTES) {
    throw new WarrenError(
      "image_invalid",
      `${name}: config of ${manifest.config.size} bytes is too large`,
    );
  }
}

/** The config and layers into the blob cache, unless this repository served them before. */
async function fetchBlobs(
  client: RegistryClient,
  manifest: ImageManifest,
  name: string,
  cache: CacheLayout,
  progress: (line: string) => void,
): Promise<void> {
  await cache.blobs.fetch(client, manifest.config);
  const layers = manifest.layers;
  for (const [i, layer] of layers.entries()) {
    const label = `pull ${name}: layer ${i + 1}/${layers.length} ${layer.digest.slice(0, 19)} ${formatMiB(layer.size)}`;
    if (await cache.blobs.has(client, layer)) {
      progress(`${label}: cached`);
      continue;
    }
    const t0 = Date.now();
    let next = 0.25;
    await cache.blobs.fetch(client, layer, (received) => {
      if (layer.size > 16 * MiB && received >= layer.size * next) {
        progress(`${label}: ${Math.round(next * 100)} %`);
        next += 0.25;
      }
    });
    progress(`${label}: downloaded (${formatDuration(Date.now() - t0)})`);
  }
}

function cacheLayout(cacheDir: string) {
  const dirs = ["blobs", "blobs/sha256", "blobs/sources", "rootfs", "tmp"];
  return {
    prepare: () =>
      prepareCache(
        cacheDir,
        dirs.map((dir) => join(cacheDir, dir)),
      ),
    blobs: new BlobCache(cacheDir),
    rootfsDir: join(cacheDir, "rootfs"),
    tmpDir: join(cacheDir, "tmp"),
    recordPath: (digest: string) =>
      join(cacheDir, "rootfs", `v${OCI_ROOTFS_RECIPE}-${digest.replace(":", "-")}.json`),
  };
}
type CacheLayout = ReturnType<typeof cacheLayout>;

async function readRecord(cache: CacheLayout, digest: string): Promise<RootfsRecord | undefined> {
  try {
    const record = JSON.parse(await readFile(cache.recordPath(digest), "utf8")) as RootfsRecord;
    if (record.recipe !== OCI_ROOTFS_RECIPE) return undefined;
    await stat(join(cache.rootfsDir, record.rootfs));
    return record;
  } catch {
    return undefined;
  }
}

async function writeRecord(
  cache: CacheLayout,
  digest: string,
  record: RootfsRecord,
): Promise<void> {
  const path = cache.recordPath(digest);
  const temp = `${path}.${process.pid}.tmp`;
  await writeFile(temp, `${JSON.stringify(record, null, 2)}\n`, { mode: 0o600 });
  await rename(temp, path);
}

/** Removes work dirs of pulls whose process is gone (an interrupted pull's leftovers). */
async function removeAbandonedWork(tmpDir: string): Promise<void> {
  for (const name of await readdir(tmpDir).catch(() => [] as string[])) {
    const pid = Number(/^\w+-(\d+)-/.exec(name)?.[1]);
    if (!pid || pid === process.pid) continue;
    try {
      process.kill(pid, 0);
    } catch {
      await rm(join(tmpDir, name), { recursive: true, force: true });
    }
  }
}

/** Flattens the manifest's layers (all in the blob cache by now) into a cached ext4. */
async function buildRootfs(
  manifest: ImageManifest,
  digest: string,
  name: string,
  options: PullImageOptions,
): Promise<RootfsRecord> {
  const cache = cacheLayout(options.cacheDir);
  const progress = options.onProgress ?? (() => {});
  await removeAbandonedWork(cache.tmpDir);
  const hex = digest.slice("sha256:".length);
  const work = join(cache.tmpDir, `rootfs-${process.pid}-${randomBytes(4).toString("hex")}`);
  const root = join(work, "root");
  try {
    await mkdir(work, { mode: 0o700 });
    await mkdir(root, { mode: 0o755 });
    const config = parseImageConfig(
      await readFile(cache.blobs.path(manifest.config.digest), "utf8"),
    );
    const preserveOwners = process.getuid?.() === 0;
    let unpacked = 0;
    const maxUnpacked = options.maxUnpackedBytes ?? 32 * GiB;
    const t1 = Date.now();
    for (const layer of manifest.layers) {
      options.signal?.throwIfAborted();
      const stats = await applyLayer(createReadStream(cache.blobs.path(layer.digest)), {
        root,
        maxBytes: maxUnpacked - unpacked,
        preserveOwners,
      });
      unpacked += stats.bytes;
    }
    const user = await ensureGuestUser(root, { setOwners: preserveOwners });
    // As a container runtime does: the image's working directory exists when it starts.
    if (config.workingDir) await makeWorkingDir(root, config.workingDir);
    progress(
      `pull ${name}: unpacked ${formatMiB(unpacked)}${user.added ? `, added user ${user.uid}:${user.gid} (${user.shell})` : ""} (${formatDuration(Date.now() - t1)})`,
    );
    const t2 = Date.now();
    const image = join(work, "rootfs.ext4");
    const sizeBytes = await makeExt4Image({
      source: root,
      output: image,
      label: "warren-oci",
      freeBytes: (options.freeMiB ?? 1024) * MiB,
      journal: true,
      runner: options.runner ?? new CommandRunner(),
    });
    await chmod(image, 0o600);
    const file = `v${OCI_ROOTFS_RECIPE}-sha256-${hex}.ext4`;
    await rename(image, join(cache.rootfsDir, file));
    const record: RootfsRecord = {
      recipe: OCI_ROOTFS_RECIPE,
      digest,
      rootfs: file,
      sizeMiB: Math.round(sizeBytes / MiB),
      config,
    };
    await writeRecord(cache, digest, record);
    progress(
      `pull ${name}: rootfs ${formatMiB(sizeBytes)} ext4 (${formatDuration(Date.now() - t2)})`,
    );
    return record;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** The image's working directory, made inside the image (never through a link out of it). */
async function makeWorkingDir(root: string, path: string): Promise<void> {
  const tree = await ImageTree.open(root);
  try {
    await (await tree.directory(path, { create: true }))?.close();
  } finally {
    await tree.close();
  }
}

function formatMiB(bytes: number): string {
  return `${(bytes / MiB).toFixed(1)} MiB`;
}
