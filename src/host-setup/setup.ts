import { existsSync } from "node:fs";
import { mkdir, rmdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { WarrenError } from "../shared/index.js";
import { Apt } from "./apt.js";
import { ArtifactBuilds } from "./artifact-builds.js";
import { CommandRunner } from "./command.js";
import { FileHashCache } from "./file-hash.js";
import { GUEST_ARTIFACTS, type GuestArtifacts, guestArtifactPaths } from "./guest-artifacts.js";
import { KernelPackage } from "./kernel-package.js";
import { defaultImagesDir, type ImagesLayout, imagesLayout } from "./layout.js";
import { type ArtifactName, readManifest } from "./manifest.js";
import { formatDuration, type ProgressSink, SetupProgress } from "./progress.js";
import { acquireSetupLock } from "./setup-lock.js";
import { REPO_ROOT, SETUP_STEPS, type SetupRun } from "./setup-steps.js";

export interface HostSetupOptions {
  /** Warren's data directory (`$WARREN_HOME` or /var/lib/warren); artifacts go to images/. */
  readonly dataDir: string;
  /**
   * Where the artifacts go instead of `<dataDir>/images` (`$WARREN_IMAGES_DIR`): e.g. a
   * cache shared by servers or test runs with data directories of their own. Must be
   * readable by the VMM account.
   */
  readonly imagesDir?: string;
  /** The built agent (envd.mjs + build/Release/*.node). Default: dist/agent of this checkout, built when missing. */
  readonly agentDir?: string;
  /** Artifacts to check and build; the others are left alone. Default: all four. */
  readonly only?: readonly ArtifactName[];
  /**
   * Artifacts to rebuild even when up to date. "kernel" also moves to the newest cloud kernel
   * (otherwise the version first installed stays pinned: snapshots depend on it);
   * "debootstrap" (the cached bootstrap tarball) also rebuilds the base rootfs.
   */
  readonly rebuild?: readonly ArtifactName[];
  /** Install missing Debian packages with apt (default true). */
  readonly installPackages?: boolean;
  /** Where progress lines go (default process.stderr); null for none. */
  readonly progress?: ProgressSink | null;
}

/**
 * Makes this host ready to run Warren's microVMs: installs the Debian packages Warren needs,
 * then builds into the images directory (`<dataDir>/images/` by default) the guest kernel,
 * initramfs, agent drive and base rootfs (docs/guest-boot.md). Idempotent: what is built and still matches its recipe, inputs
 * and recorded sha256 is kept; a second run does nothing and takes well under a second. One
 * run at a time per images directory (a lock file; a second caller waits).
 */
export async function ensureHostSetup(options: HostSetupOptions): Promise<GuestArtifacts> {
  const started = performance.now();
  const progress = new SetupProgress(
    options.progress === undefined ? process.stderr : options.progress,
    SETUP_STEPS.length,
  );
  if (process.getuid?.() !== 0)
    throw new WarrenError(
      "permission_denied",
      "host setup must run as root: it installs Debian packages and runs debootstrap",
    );
  const imagesDir = options.imagesDir ?? defaultImagesDir(options.dataDir);
  const layout = imagesLayout(imagesDir);
  await mkdir(layout.cacheDir, { recursive: true });
  const release = await acquireSetupLock(layout.lock, (pid) =>
    progress.line(`waiting for the setup run of pid ${pid} to finish`),
  );
  const runner = new CommandRunner(layout.log);
  const scratch: Scratch = {};
  try {
    const run = await openRun(options, layout, runner, scratch);
    for (const [i, { name, serves, run: work }] of SETUP_STEPS.entries()) {
      const step = progress.step(i + 1, name);
      if (serves && !run.targets.has(serves)) step.done("skipped (not requested)", 0);
      else await work(run, step);
    }
    await run.builds.save();
    const total = formatDuration(performance.now() - started);
    progress.line(
      run.built.length > 0
        ? `done in ${total}: built ${run.built.join(", ")}`
        : `done in ${total}: nothing to do`,
    );
    return guestArtifactPaths(imagesDir, run.builds.manifest);
  } finally {
    if (scratch.dir)
      await runner
        .run("rm", ["-rf", "--one-file-system", await scratch.dir])
        .catch(() => undefined);
    await rmdir(layout.tmpDir).catch(() => undefined);
    await release();
  }
}

/** The run's scratch directory, made when something first asks for it. */
interface Scratch {
  dir?: Promise<string>;
}

/** Starts a run holding the lock: a fresh log, no scratch of interrupted runs, the manifest read. */
async function openRun(
  options: HostSetupOptions,
  layout: ImagesLayout,
  runner: CommandRunner,
  scratch: Scratch,
): Promise<SetupRun> {
  await writeFile(layout.log, "");
  // Scratch space of interrupted runs (the lock says none is running).
  if (existsSync(layout.tmpDir))
    await runner.run("rm", ["-rf", "--one-file-system", layout.tmpDir]);
  const hashes = await FileHashCache.load(layout.hashCache);
  const builds = new ArtifactBuilds(layout, await readManifest(layout.manifest), hashes, runner);
  const apt = new Apt(runner);
  const rebuild = new Set<ArtifactName>(options.rebuild ?? []);
  // A fresh bootstrap is only useful under a fresh base rootfs.
  if (rebuild.has("debootstrap")) {
    rebuild.add("base-rootfs");
    rebuild.add("code-interpreter-rootfs");
  }
  const kernelRecord = builds.record("kernel");
  const kernelPackage = new KernelPackage({
    apt,
    runner,
    cacheDir: layout.cacheDir,
    workDir: () => {
      scratch.dir ??= builds.createWorkDir("run");
      return scratch.dir;
    },
    pinned:
      kernelRecord &&
      !rebuild.has("kernel") &&
      kernelRecord.inputs.package &&
      kernelRecord.inputs.version
        ? { name: kernelRecord.inputs.package, version: kernelRecord.inputs.version }
        : undefined,
  });
  return {
    layout,
    runner,
    apt,
    hashes,
    builds,
    kernelPackage,
    targets: new Set<ArtifactName>(options.only ?? GUEST_ARTIFACTS),
    rebuild,
    built: [],
    installPackages: options.installPackages !== false,
    agentDir: options.agentDir ?? join(REPO_ROOT, "dist", "agent"),
    agentDirGiven: options.agentDir !== undefined,
  };
}
