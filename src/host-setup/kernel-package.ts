import { mkdir, readdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { WarrenError } from "../shared/index.js";
import type { Apt } from "./apt.js";
import type { CommandRunner } from "./command.js";

/** Debian's metapackage that always depends on the newest cloud kernel image. */
export const CLOUD_KERNEL_METAPACKAGE = "linux-image-cloud-amd64";

/** A kernel image package, pinned by exact version. */
export interface KernelPackageRef {
  /** e.g. linux-image-6.1.0-57-cloud-amd64 */
  readonly name: string;
  /** e.g. 6.1.192-3 */
  readonly version: string;
}

/** The kernel release (`uname -r`) a linux-image package carries: 6.1.0-57-cloud-amd64. */
export function kernelRelease(packageName: string): string {
  if (!packageName.startsWith("linux-image-"))
    throw new WarrenError("invalid_argument", `${packageName} is not a linux-image package`);
  return packageName.slice("linux-image-".length);
}

/** Picks the real image package out of the metapackage's dependencies. */
export function pickKernelImage(dependencies: readonly string[]): string | undefined {
  return dependencies.find((name) => /^linux-image-\d.*-cloud-amd64$/.test(name));
}

/**
 * The guest kernel's .deb: found through the metapackage, downloaded (never installed) into
 * the cache directory, where it stays so later rebuilds of the kernel or initramfs need no
 * network and keep the same version. Unpacked at most once per setup run.
 */
export class KernelPackage {
  readonly #apt: Apt;
  readonly #runner: CommandRunner;
  readonly #cacheDir: string;
  readonly #workDir: () => Promise<string>;
  #ref: KernelPackageRef | undefined;
  #deb: string | undefined;
  #unpacked: Promise<string> | undefined;

  constructor(options: {
    apt: Apt;
    runner: CommandRunner;
    cacheDir: string;
    /** Makes a scratch directory that outlives this run's builds (removed by the caller). */
    workDir: () => Promise<string>;
    /** The version to use; undefined resolves the newest through the metapackage. */
    pinned: KernelPackageRef | undefined;
  }) {
    this.#apt = options.apt;
    this.#runner = options.runner;
    this.#cacheDir = options.cacheDir;
    this.#workDir = options.workDir;
    this.#ref = options.pinned;
  }

  /** Whether the package is known without asking apt (pinned, or resolved already). */
  get resolved(): boolean {
    return this.#ref !== undefined;
  }

  /** The pinned package, or the newest one the metapackage points at (downloading it). */
  async ref(): Promise<KernelPackageRef> {
    if (this.#ref) return this.#ref;
    const dependencies = await this.#apt.dependencies(CLOUD_KERNEL_METAPACKAGE);
    const name = pickKernelImage(dependencies);
    if (!name)
      throw new WarrenError(
        "unavailable",
        `apt cannot resolve ${CLOUD_KERNEL_METAPACKAGE} to a kernel image (got ${dependencies.join(", ") || "nothing"}); check the host's Debian apt sources`,
      );
    this.#deb = await this.#download(name);
    const { stdout } = await this.#runner.run("dpkg-deb", ["-f", this.#deb, "Version"]);
    this.#ref = { name, version: stdout.trim() };
    return this.#ref;
  }

  /** Path of the .deb in the cache, downloaded when missing. */
  async deb(): Promise<string> {
    if (this.#deb) return this.#deb;
    const ref = await this.ref();
    this.#deb ??= await this.#download(`${ref.name}=${ref.version}`, ref);
    return this.#deb;
  }

  /** A directory with the .deb unpacked (boot/, lib/modules/). */
  unpacked(): Promise<string> {
    this.#unpacked ??= (async () => {
      const dir = join(await this.#workDir(), "kernel");
      await mkdir(dir, { recursive: true });
      const first = await this.#runner.run("dpkg-deb", ["-x", await this.deb(), dir], {
        allowFailure: true,
      });
      if (first.code !== 0) {
        // A damaged download in the cache: fetch it again once.
        await rm(await this.deb(), { force: true });
        this.#deb = undefined;
        await this.#runner.run("dpkg-deb", ["-x", await this.deb(), dir]);
      }
      return dir;
    })();
    return this.#unpacked;
  }

  async #download(spec: string, ref?: KernelPackageRef): Promise<string> {
    await mkdir(this.#cacheDir, { recursive: true });
    if (ref) {
      const cached = await this.#cached(ref);
      if (cached) return cached;
    }
    const dir = join(await this.#workDir(), "download");
    await mkdir(dir, { recursive: true });
    await this.#apt.download(spec, dir);
    const [file] = (await readdir(dir)).filter((name) => name.endsWith(".deb"));
    if (!file) throw new WarrenError("internal", `apt-get download ${spec} produced no .deb`);
    await rename(join(dir, file), join(this.#cacheDir, file));
    return join(this.#cacheDir, file);
  }

  async #cached(ref: KernelPackageRef): Promise<string | undefined> {
    // apt names files <name>_<version with ':' as %3a>_<arch>.deb
    const prefix = `${ref.name}_${ref.version.replaceAll(":", "%3a")}_`;
    const names = await readdir(this.#cacheDir);
    const found = names.find((name) => name.startsWith(prefix) && name.endsWith(".deb"));
    return found ? join(this.#cacheDir, found) : undefined;
  }
}
