import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { gunzipSync, gzipSync } from "node:zlib";
import type { CommandRunner } from "./command.js";
import { type CpioEntry, newcArchive } from "./cpio.js";
import { INITRAMFS_INIT } from "./initramfs-init.js";
import type { ModuleFile } from "./kernel-modules.js";

/** Bump when what goes into the initramfs, or how, changes. */
export const INITRAMFS_RECIPE = 1;

export interface InitramfsOptions {
  readonly output: string;
  /** The unpacked kernel's lib/modules/<release>/ directory. */
  readonly modulesDir: string;
  /** Modules to load at boot, dependencies first. */
  readonly modules: readonly ModuleFile[];
  /** A static busybox binary. */
  readonly busybox: string;
  readonly runner: CommandRunner;
}

/** A module as an uncompressed .ko, which busybox insmod can load whatever the kernel's choice. */
async function moduleBytes(runner: CommandRunner, path: string): Promise<Buffer> {
  if (path.endsWith(".ko")) return readFile(path);
  if (path.endsWith(".ko.gz")) return gunzipSync(await readFile(path));
  if (path.endsWith(".ko.xz")) await runner.run("xz", ["-d", "-k", "-f", path]);
  else if (path.endsWith(".ko.zst")) await runner.run("zstd", ["-d", "-q", "-f", path]);
  else throw new Error(`unknown kernel module format: ${path}`);
  return readFile(path.replace(/\.(xz|zst)$/, ""));
}

/** Writes initramfs.cpio.gz: busybox, /init, the modules and their load order. */
export async function buildInitramfs(options: InitramfsOptions): Promise<void> {
  const entries: CpioEntry[] = [
    { type: "dir", path: "bin" },
    { type: "file", path: "bin/busybox", data: await readFile(options.busybox), mode: 0o755 },
    { type: "symlink", path: "bin/sh", target: "busybox" },
    { type: "dir", path: "dev" },
    // The kernel opens /dev/console for /init's stdio before anything is mounted.
    { type: "char", path: "dev/console", major: 5, minor: 1, mode: 0o600 },
    { type: "char", path: "dev/null", major: 1, minor: 3, mode: 0o666 },
    { type: "dir", path: "etc" },
    {
      type: "file",
      path: "etc/modules",
      data: Buffer.from(options.modules.map((m) => `${m.name}\n`).join("")),
    },
    { type: "dir", path: "lib" },
    { type: "dir", path: "lib/modules" },
    { type: "dir", path: "newroot" },
    { type: "dir", path: "proc" },
    { type: "dir", path: "sys" },
    { type: "file", path: "init", data: Buffer.from(INITRAMFS_INIT), mode: 0o755 },
  ];
  for (const module of options.modules) {
    const data = await moduleBytes(options.runner, join(options.modulesDir, module.path));
    entries.push({ type: "file", path: `lib/modules/${module.name}.ko`, data });
  }
  await writeFile(options.output, gzipSync(newcArchive(entries), { level: 9 }));
}
