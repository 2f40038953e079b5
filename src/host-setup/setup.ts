import { existsSync } from "node:fs";
import { mkdir, rmdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { WarrenError } from "../shared/index.js";
import { agentDriveSpec } from "./agent-drive.js";
import { Apt } from "./apt.js";
import { debianMirrors, hostAptSources } from "./apt-sources.js";
import { ArtifactBuilds, type ArtifactSpec } from "./artifact-builds.js";
import { baseRootfsSpec } from "./base-rootfs.js";
import { CommandRunner } from "./command.js";
import { DEBIAN_ARCH, DEBIAN_SUITE, DEBOOTSTRAP_VARIANT, debootstrapSpec } from "./debootstrap.js";
import { FileHashCache } from "./file-hash.js";
import { GUEST_ARTIFACTS, type GuestArtifacts, guestArtifactPaths } from "./guest-artifacts.js";
import { HOST_PACKAGES, missingPackages } from "./host-packages.js";
import { initramfsSpec, kernelSpec } from "./kernel.js";
import { CLOUD_KERNEL_METAPACKAGE, KernelPackage, kernelRelease } from "./kernel-package.js";
import { defaultImagesDir, imagesLayout } from "./layout.js";
import { type ArtifactName, type ArtifactRecord, readManifest } from "./manifest.js";
import { formatDuration, type ProgressSink, SetupProgress, type StepProgress } from "./progress.js";
import { installedQemuVersion, installQemu, isRecentEnough } from "./qemu-package.js";
import { acquireSetupLock } from "./setup-lock.js";
import { assertStatic, BUSYBOX_STATIC, TINI_STATIC } from "./static-binaries.js";

const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));
const STEPS = 6;

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

interface StepContext {
  readonly builds: ArtifactBuilds;
  readonly step: StepProgress;
  readonly rebuild: ReadonlySet<ArtifactName>;
  readonly built: ArtifactName[];
}

/** Reuses or rebuilds one artifact, saying which and why. */
async function ensureArtifact(
  ctx: StepContext,
  spec: ArtifactSpec,
  what: string,
  started = performance.now(),
): Promise<ArtifactRecord> {
  const reason = await ctx.builds.staleReason(spec, ctx.rebuild.has(spec.name));
  const existing = ctx.builds.record(spec.name);
  if (!reason && existing) {
    ctx.step.done(`${what} up to date`, performance.now() - started);
    return existing;
  }
  ctx.step.info(`building ${what} (${reason})`);
  const record = await ctx.builds.build(spec);
  ctx.built.push(spec.name);
  const mib = (record.sizeBytes / (1024 * 1024)).toFixed(1);
  ctx.step.done(`built ${record.file}, ${mib} MiB`, performance.now() - started);
  return record;
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
    STEPS,
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
  const built: ArtifactName[] = [];
  let runDir: Promise<string> | undefined;
  try {
    await writeFile(layout.log, "");
    // Scratch space of interrupted runs (the lock says none is running).
    if (existsSync(layout.tmpDir))
      await runner.run("rm", ["-rf", "--one-file-system", layout.tmpDir]);
    const hashes = await FileHashCache.load(layout.hashCache);
    const builds = new ArtifactBuilds(layout, await readManifest(layout.manifest), hashes, runner);
    const apt = new Apt(runner);
    const targets = new Set<ArtifactName>(options.only ?? GUEST_ARTIFACTS);
    const rebuild = new Set<ArtifactName>(options.rebuild ?? []);
    // A fresh bootstrap is only useful under a fresh base rootfs.
    if (rebuild.has("debootstrap")) rebuild.add("base-rootfs");
    const context = (index: number, name: string): StepContext => ({
      builds,
      step: progress.step(index, name),
      rebuild,
      built,
    });
    const skipped = (ctx: StepContext) => ctx.step.done("skipped (not requested)", 0);

    // 1. Debian packages.
    {
      const { step } = context(1, "host packages");
      const t = performance.now();
      if (options.installPackages === false) step.done("skipped (installPackages: false)", 0);
      else {
        const missing = await missingPackages(runner, HOST_PACKAGES);
        if (missing.length === 0)
          step.done(`all ${HOST_PACKAGES.length} present`, performance.now() - t);
        else await step.task(`apt-get install ${missing.join(" ")}`, () => apt.install(missing));
        if (!isRecentEnough(await installedQemuVersion(runner)))
          await step.task("installing QEMU", () => installQemu(runner, apt));
      }
    }

    // 2. The agent bundle that goes onto the agent drive.
    const agentDir = options.agentDir ?? join(REPO_ROOT, "dist", "agent");
    {
      const ctx = context(2, "agent bundle");
      const t = performance.now();
      if (!targets.has("agent-drive")) skipped(ctx);
      else if (existsSync(join(agentDir, "envd.mjs")))
        ctx.step.done(`${agentDir} present`, performance.now() - t);
      else {
        const script = join(REPO_ROOT, "scripts", "build.mjs");
        if (options.agentDir || !existsSync(script))
          throw new WarrenError("not_found", `${agentDir}/envd.mjs is missing: run npm run build`);
        await ctx.step.task("building it (node scripts/build.mjs)", () =>
          runner.run(process.execPath, [script], { cwd: REPO_ROOT }),
        );
      }
    }

    // 3-4. Kernel and initramfs, from one pinned linux-image .deb.
    const kernelRecord = builds.record("kernel");
    const kernelPackage = new KernelPackage({
      apt,
      runner,
      cacheDir: layout.cacheDir,
      workDir: () => {
        runDir ??= builds.createWorkDir("run");
        return runDir;
      },
      pinned:
        kernelRecord &&
        !rebuild.has("kernel") &&
        kernelRecord.inputs.package &&
        kernelRecord.inputs.version
          ? { name: kernelRecord.inputs.package, version: kernelRecord.inputs.version }
          : undefined,
    });
    for (const [index, name] of [
      [3, "kernel"],
      [4, "initramfs"],
    ] as const) {
      const ctx = context(index, name);
      if (!targets.has(name)) {
        skipped(ctx);
        continue;
      }
      const t = performance.now();
      if (!kernelPackage.resolved)
        await ctx.step.task(`resolving ${CLOUD_KERNEL_METAPACKAGE} and downloading it`, () =>
          kernelPackage.ref(),
        );
      const ref = await kernelPackage.ref();
      const what = kernelRelease(ref.name);
      if (name === "kernel") {
        await ensureArtifact(ctx, kernelSpec({ path: layout.kernel, ref, kernelPackage }), what, t);
      } else {
        await assertStatic(BUSYBOX_STATIC, "busybox-static");
        const busybox = { path: BUSYBOX_STATIC, sha256: (await hashes.hash(BUSYBOX_STATIC)) ?? "" };
        const spec = initramfsSpec({ path: layout.initramfs, ref, kernelPackage, busybox, runner });
        await ensureArtifact(ctx, spec, `initramfs for ${what}`, t);
      }
    }

    // 5. Agent drive.
    {
      const ctx = context(5, "agent drive");
      if (!targets.has("agent-drive")) skipped(ctx);
      else {
        const t = performance.now();
        await assertStatic(BUSYBOX_STATIC, "busybox-static");
        await assertStatic(TINI_STATIC, "tini");
        const spec = await agentDriveSpec({
          path: layout.agentDrive,
          sources: {
            agentDir,
            node: process.execPath,
            busybox: BUSYBOX_STATIC,
            tini: TINI_STATIC,
            resize2fs: "/sbin/resize2fs",
          },
          runner,
          hashes,
          step: ctx.step,
          previous: builds.record("agent-drive"),
        });
        await ensureArtifact(ctx, spec, "agent.ext4", t);
      }
    }

    // 6. Base rootfs, on a cached debootstrap tarball.
    {
      const ctx = context(6, "base rootfs");
      if (!targets.has("base-rootfs")) skipped(ctx);
      else {
        const mirrors = debianMirrors(await hostAptSources(), DEBIAN_SUITE);
        const tarball = debootstrapSpec({
          path: join(
            layout.cacheDir,
            `debootstrap-${DEBIAN_SUITE}-${DEBOOTSTRAP_VARIANT}-${DEBIAN_ARCH}.tar.zst`,
          ),
          mirror: mirrors.archive,
          runner,
        });
        const spec = baseRootfsSpec({
          path: layout.baseRootfs,
          mirrors,
          runner,
          step: ctx.step,
          debootstrap: async () => {
            const reason = await builds.staleReason(tarball, rebuild.has("debootstrap"));
            if (!reason) ctx.step.done("debootstrap tarball cached", 0);
            else {
              await ctx.step.task(
                `debootstrap ${DEBIAN_SUITE} from ${mirrors.archive} (${reason})`,
                () => builds.build(tarball),
              );
              built.push("debootstrap");
            }
            return tarball.path;
          },
        });
        await ensureArtifact(ctx, spec, "base.ext4");
      }
    }

    await builds.save();
    const total = formatDuration(performance.now() - started);
    progress.line(
      built.length > 0
        ? `done in ${total}: built ${built.join(", ")}`
        : `done in ${total}: nothing to do`,
    );
    return guestArtifactPaths(imagesDir, builds.manifest);
  } finally {
    if (runDir)
      await runner.run("rm", ["-rf", "--one-file-system", await runDir]).catch(() => undefined);
    await rmdir(layout.tmpDir).catch(() => undefined);
    await release();
  }
}
