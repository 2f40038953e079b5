import { lstat, open, opendir } from "node:fs/promises";
import { join } from "node:path";
import type { CommandRunner } from "./command.js";

const BLOCK = 4096;
const MiB = 1024 * 1024;

export interface TreeUsage {
  /** Bytes the tree takes in 4 KiB blocks (hard links counted once). */
  readonly bytes: number;
  /** Files, directories, links and nodes. */
  readonly inodes: number;
}

/** Block usage and inode count of a directory tree, without crossing into other mounts. */
export async function treeUsage(root: string): Promise<TreeUsage> {
  const rootDev = (await lstat(root)).dev;
  const seen = new Set<number>();
  let bytes = 0;
  let inodes = 0;
  const walk = async (dir: string): Promise<void> => {
    for await (const entry of await opendir(dir)) {
      const path = join(dir, entry.name);
      const st = await lstat(path);
      if (st.dev !== rootDev) continue;
      if (st.nlink > 1 && !st.isDirectory()) {
        if (seen.has(st.ino)) continue;
        seen.add(st.ino);
      }
      inodes++;
      if (st.isDirectory()) {
        bytes += BLOCK;
        await walk(path);
      } else if (st.isFile() || (st.isSymbolicLink() && st.size >= 60)) {
        bytes += Math.ceil(st.size / BLOCK) * BLOCK;
      }
    }
  };
  await walk(root);
  return { bytes, inodes };
}

export interface Ext4ImageOptions {
  /** Directory whose contents (owners, modes, links, devices, xattrs) become the filesystem. */
  readonly source: string;
  readonly output: string;
  readonly label: string;
  /** Free space to leave beyond the content and filesystem overhead. */
  readonly freeBytes: number;
  /** A journal for a read-write filesystem; none for a read-only one. */
  readonly journal: boolean;
  readonly runner: CommandRunner;
}

/**
 * Makes an ext4 image of a directory with `mkfs.ext4 -d` (no loop mount, no root-only mount
 * step), sized to content + metadata + `freeBytes`, as a sparse file. Returns its size.
 */
export async function makeExt4Image(options: Ext4ImageOptions): Promise<number> {
  const usage = await treeUsage(options.source);
  const inodes = Math.ceil(usage.inodes * 1.5) + 4096;
  // Content, ~5 % for extents/directories/bitmaps, inode tables (256 B each), journal.
  const raw =
    usage.bytes * 1.05 +
    inodes * 256 +
    (options.journal ? 64 * MiB : 0) +
    16 * MiB +
    options.freeBytes;
  const sizeBytes = Math.ceil(raw / (16 * MiB)) * 16 * MiB;
  const file = await open(options.output, "w");
  await file.truncate(sizeBytes);
  await file.close();
  const args = ["-F", "-q", "-t", "ext4", "-T", "default", "-b", String(BLOCK), "-m", "0"];
  args.push("-N", String(Math.max(inodes, Math.floor(sizeBytes / 16384))));
  args.push("-L", options.label, "-E", "root_owner=0:0");
  if (!options.journal) args.push("-O", "^has_journal");
  args.push("-d", options.source, options.output);
  await options.runner.run("mkfs.ext4", args);
  return sizeBytes;
}
