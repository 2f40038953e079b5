import { lstat, realpath } from "node:fs/promises";
import { basename, dirname, isAbsolute, join, resolve, sep } from "node:path";
import { SnapshotTamperedError, VmmError } from "../errors.js";
import type { DiskLayer } from "./args.js";
import {
  DISK_FILE,
  type DiskBacking,
  readSnapshotMeta,
  type SnapshotFileRef,
  type SnapshotMeta,
} from "./snapshot-meta.js";

/**
 * Snapshots stand on each other (a pause's memory image is its template's, a disk layer is
 * stacked on its parent's), and each records what it stands on by name: a sibling's directory
 * name and a file name in it, resolved against the directory the snapshot is found in now.
 * So a snapshot copied elsewhere with its ancestors beside it (another node's data dir, a
 * cache of fetched snapshots) resolves there, and a reference can never leave the snapshots'
 * common directory: a path, a dot-name, a symbolic link or an absolute path where a sibling
 * is expected is refused. Only images outside every snapshot (the guest images, the same on
 * every node) are named by absolute path, and only inside the guest images directory.
 */

/** Where the images a chain may end on lie: the node's guest images directory. */
export interface ChainPolicy {
  readonly imagesDir: string;
}

/** Names a reference may hold: the store's ids and file names, never `.`, `..` or a path. */
const PLAIN_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** Chains deeper than this are refused (a loop of records, or flattening that never ran). */
const MAX_CHAIN = 1000;

/** An image of a disk chain where it lies now; `snapshotDir` when it is a snapshot's disk. */
export interface ChainLayer extends DiskLayer {
  readonly snapshotDir?: string;
  /** The record that named this layer, in the snapshot above it (none for the top). */
  readonly record?: DiskBacking;
}

/** A resolved reference: the snapshot directory holding the file, and the file's path. */
export interface ResolvedFile {
  readonly dir: string;
  readonly path: string;
}

export interface SnapshotChain {
  /** The snapshot's own directory, as its references are resolved against. */
  readonly dir: string;
  readonly meta: SnapshotMeta;
  /** The snapshot's disk and every image below it, nearest first: QEMU's explicit chain. */
  readonly disk: readonly ChainLayer[];
  readonly memoryImage: ResolvedFile;
  /** Every snapshot a restore reads files of: itself, its disk chain's, its memory image's. */
  readonly dirs: readonly string[];
}

function refused(dir: string, message: string): SnapshotTamperedError {
  return new SnapshotTamperedError(`snapshot ${dir}: ${message}`);
}

/** `name` if it names an entry of a directory, else a refusal saying what it is instead. */
function plainName(dir: string, what: string, name: unknown): string {
  if (typeof name === "string" && PLAIN_NAME.test(name)) return name;
  const kind =
    typeof name !== "string"
      ? "not a name"
      : isAbsolute(name)
        ? "an absolute path"
        : name.includes("/") || name.startsWith(".")
          ? "a path"
          : "not a plain name";
  throw refused(
    dir,
    `its ${what} ${JSON.stringify(name)} is ${kind}; snapshots name a snapshot beside them and a file in it, never a path`,
  );
}

/**
 * Checks that `path` is a directory itself, not a link to one: a relative backing name in a
 * qcow2 header (`../<sibling>/disk.qcow2`, followed by qemu-img) must reach the same file
 * the records resolve to, and a link could lead anywhere.
 */
async function realDirectory(path: string, missing: () => Error): Promise<void> {
  const stat = await lstat(path).catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") throw missing();
    throw new VmmError(`cannot look at ${path}: ${err.message}`, undefined, { cause: err });
  });
  if (stat.isSymbolicLink())
    throw new SnapshotTamperedError(
      `${path} is a symbolic link: snapshots are followed only into directories beside each other`,
    );
  if (!stat.isDirectory()) throw new SnapshotTamperedError(`${path} is not a directory`);
}

/** The directory of the snapshot named `name` beside `dir`, which must be there. */
async function sibling(dir: string, name: unknown, what: string): Promise<string> {
  const path = join(dirname(dir), plainName(dir, `${what}'s snapshot`, name));
  await realDirectory(
    path,
    () =>
      new SnapshotTamperedError(
        `snapshot ${dir} stands on ${String(name)} (its ${what}), which is not beside it: ${path} is missing (a snapshot is restored with every snapshot it stands on in the same directory)`,
      ),
  );
  return path;
}

/** Where a reference made by the snapshot in `dir` points; `what` names it in refusals. */
export async function resolveFile(
  dir: string,
  ref: SnapshotFileRef,
  what: string,
): Promise<ResolvedFile> {
  const own = resolve(dir);
  if (typeof ref !== "object" || ref === null) throw refused(own, `its ${what} is not a reference`);
  const file = plainName(own, `${what}'s file`, ref.file);
  const holder = ref.snapshot === undefined ? own : await sibling(own, ref.snapshot, what);
  return { dir: holder, path: join(holder, file) };
}

/**
 * The image a disk backing record made by the snapshot in `dir` names, where it lies now: a
 * sibling's disk, or an image of the guest images directory (by name, and where links lead).
 */
export async function resolveBacking(
  dir: string,
  backing: DiskBacking,
  policy: ChainPolicy,
): Promise<ChainLayer> {
  const own = resolve(dir);
  if (typeof backing === "object" && backing !== null && "snapshot" in backing) {
    if (backing.format !== "qcow2") throw refused(own, "its disk backing is not a qcow2 layer");
    const { dir: snapshotDir, path } = await resolveFile(own, backing, "disk backing");
    return { file: path, format: "qcow2", snapshotDir, record: backing };
  }
  const image = (backing as { image?: unknown } | null)?.image;
  if (typeof image !== "string" || !isAbsolute(image))
    throw refused(
      own,
      `its disk backing ${JSON.stringify(backing)} is neither a snapshot's nor an image's`,
    );
  // An image inside the snapshots' directory is a snapshot's file: it must be named as one.
  if (resolve(image).startsWith(`${dirname(own)}${sep}`))
    throw refused(
      own,
      `its disk backing names ${image} by absolute path, inside the snapshots' directory; a snapshot's disk is named by its snapshot`,
    );
  await insideImages(own, image, policy.imagesDir);
  return { file: image, format: backing.format === "qcow2" ? "qcow2" : "raw", record: backing };
}

/**
 * Refuses an image outside the guest images directory, by its name or where its links lead
 * (a missing image is left to fail where it is opened): a snapshot's records could
 * otherwise hand QEMU, still root while it opens its disks, any file of the host as a disk.
 */
async function insideImages(own: string, image: string, imagesDir: string): Promise<void> {
  const within = (path: string, dir: string) => path.startsWith(`${dir}${sep}`);
  const outside = () =>
    refused(
      own,
      `its disk backing names ${image}, outside the guest images directory ${imagesDir}`,
    );
  const dir = resolve(imagesDir);
  if (!within(resolve(image), dir)) throw outside();
  const real = await realpath(image).catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") return undefined;
    throw new VmmError(`cannot look at ${image}: ${err.message}`, undefined, { cause: err });
  });
  if (real !== undefined && !within(real, await realpath(dir).catch(() => dir))) throw outside();
}

/**
 * Reads a snapshot's records and everything they stand on, refusing loops, chains deeper
 * than MAX_CHAIN, any reference that leaves the snapshots' directory and an image outside
 * the guest images directory (`policy`). `snapshotDir` must be a directory itself (not a
 * link), as each snapshot it stands on must.
 */
export async function readChain(snapshotDir: string, policy: ChainPolicy): Promise<SnapshotChain> {
  const top = resolve(snapshotDir);
  await realDirectory(top, () => new VmmError(`snapshot ${top} is missing`));
  const meta = await readSnapshotMeta(top);
  const memoryImage = await resolveFile(top, meta.memoryImage, "memory image");
  const disk: ChainLayer[] = [{ file: join(top, DISK_FILE), format: "qcow2", snapshotDir: top }];
  const seen = new Set([top]);
  let above = top;
  let below: DiskBacking = meta.diskBacking;
  for (;;) {
    if (disk.length > MAX_CHAIN)
      throw new VmmError(`snapshot ${top}: disk chain deeper than ${MAX_CHAIN}`);
    const layer = await resolveBacking(above, below, policy);
    disk.push(layer);
    if (!layer.snapshotDir) break;
    if (seen.has(layer.snapshotDir))
      throw refused(top, `its disk chain loops at ${layer.snapshotDir}`);
    seen.add(layer.snapshotDir);
    above = layer.snapshotDir;
    below = (await readSnapshotMeta(above)).diskBacking;
  }
  return { dir: top, meta, disk, memoryImage, dirs: [...new Set([...seen, memoryImage.dir])] };
}

/**
 * What a capture into `dir` records for the file at `path` of the snapshot in `holderDir`:
 * its own file, or a sibling's. A capture stands only on snapshots beside it (so that it
 * can be moved with them), and is refused before anything is captured otherwise.
 */
export function fileRef(dir: string, holderDir: string, path: string): SnapshotFileRef {
  const [own, holder] = [resolve(dir), resolve(holderDir)];
  if (dirname(resolve(path)) !== holder) throw new VmmError(`${path} is not in ${holder}`);
  // Names a later restore would refuse are refused now, before anything is captured.
  const named = (name: string) => {
    if (PLAIN_NAME.test(name)) return name;
    throw new VmmError(`cannot capture into ${own}: "${name}" is not a name a snapshot can record`);
  };
  named(basename(own));
  if (holder === own) return { file: named(basename(path)) };
  if (dirname(holder) !== dirname(own))
    throw new VmmError(
      `cannot capture into ${own}: it would stand on ${holder}, which is not beside it (snapshots stand only on snapshots in the same directory)`,
    );
  return { snapshot: named(basename(holder)), file: named(basename(path)) };
}

/** The record a capture into `dir` keeps of the image its disk is stacked on. */
export function backingRecord(dir: string, layer: ChainLayer): DiskBacking {
  if (!layer.snapshotDir) return { image: layer.file, format: layer.format };
  const { snapshot, file } = fileRef(dir, layer.snapshotDir, layer.file);
  if (snapshot === undefined) throw new VmmError(`${dir} cannot stand on its own disk`);
  return { snapshot, file, format: "qcow2" };
}

/**
 * The backing name a qcow2 header carries for `backing`. qemu-img (flattening) follows it,
 * relative to the image's own directory: a sibling's disk is `../<sibling>/<file>`, so the
 * header reaches the same image as the records wherever the snapshots lie.
 */
export function headerName(backing: DiskBacking): string {
  return "snapshot" in backing ? `../${backing.snapshot}/${backing.file}` : backing.image;
}

/** The record of the disk of the snapshot in `snapshotDir`, as a sibling of it names it. */
export function diskOf(snapshotDir: string): DiskBacking {
  return { snapshot: basename(resolve(snapshotDir)), file: DISK_FILE, format: "qcow2" };
}
