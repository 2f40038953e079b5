import { join } from "node:path";

/** The data directory Warren uses when neither a flag nor `$WARREN_HOME` names one. */
export const DEFAULT_DATA_DIR = "/var/lib/warren";

/**
 * Where every guest artifact lives in the images directory: `<data dir>/images/` unless the
 * server is given another (WARREN_IMAGES_DIR; docs/guest-boot.md).
 */
export interface ImagesLayout {
  readonly dir: string;
  readonly kernel: string;
  readonly initramfs: string;
  readonly agentDrive: string;
  readonly baseRootfs: string;
  /** The code-interpreter-v1 template's rootfs: base plus Python's data stack (optional). */
  readonly codeInterpreterRootfs: string;
  readonly manifest: string;
  /** Downloads and intermediate results kept to make rebuilds cheap (kernel .deb, debootstrap tarball). */
  readonly cacheDir: string;
  /** sha256 of files by (dev, inode, size, mtime, ctime), so an unchanged file is not re-read. */
  readonly hashCache: string;
  /** Builds happen here, then rename into place; wiped at the start of every setup run. */
  readonly tmpDir: string;
  /** Held by the setup run in progress (contains its pid). */
  readonly lock: string;
  /** Output of every command the last setup run executed. */
  readonly log: string;
}

/** The images directory of a data directory, when none is configured. */
export function defaultImagesDir(dataDir: string): string {
  return join(dataDir, "images");
}

/** The layout of the images directory `dir`. */
export function imagesLayout(dir: string): ImagesLayout {
  return {
    dir,
    kernel: join(dir, "vmlinuz"),
    initramfs: join(dir, "initramfs.cpio.gz"),
    agentDrive: join(dir, "agent.ext4"),
    baseRootfs: join(dir, "base.ext4"),
    codeInterpreterRootfs: join(dir, "code-interpreter.ext4"),
    manifest: join(dir, "manifest.json"),
    cacheDir: join(dir, "cache"),
    hashCache: join(dir, "cache", "file-hashes.json"),
    tmpDir: join(dir, ".tmp"),
    lock: join(dir, ".setup.lock"),
    log: join(dir, "setup.log"),
  };
}
