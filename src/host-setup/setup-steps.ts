import { existsSync } from "node:fs";
import { basename, join } from "node:path";
import { fileURLToPath } from "node:url";
import { WarrenError } from "../shared/index.js";
import { agentDriveSpec } from "./agent-drive.js";
import type { Apt } from "./apt.js";
import { debianMirrors, hostAptSources } from "./apt-sources.js";
import type { ArtifactBuilds, ArtifactSpec } from "./artifact-builds.js";
import { BASE_ROOTFS, CODE_INTERPRETER_ROOTFS, rootfsSpec } from "./base-rootfs.js";
import type { CommandRunner } from "./command.js";
import { DEBIAN_ARCH, DEBIAN_SUITE, DEBOOTSTRAP_VARIANT, debootstrapSpec } from "./debootstrap.js";
import type { FileHashCache } from "./file-hash.js";
import { HOST_PACKAGES, missingPackages } from "./host-packages.js";
import { initramfsSpec, kernelSpec } from "./kernel.js";
import {
  CLOUD_KERNEL_METAPACKAGE,
  type KernelPackage,
  type KernelPackageRef,
  kernelRelease,
} from "./kernel-package.js";
import type { ImagesLayout } from "./layout.js";
import type { ArtifactName, ArtifactRecord } from "./manifest.js";
import type { StepProgress } from "./progress.js";
import { installedQemuVersion, installQemu, isRecentEnough } from "./qemu-package.js";
import { assertStatic, BUSYBOX_STATIC, TINI_STATIC } from "./static-binaries.js";

export const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** What the steps of one setup run share (made by setup.ts once it holds the lock). */
export interface SetupRun {
  readonly layout: ImagesLayout;
  readonly runner: CommandRunner;
  readonly apt: Apt;
  readonly hashes: FileHashCache;
  readonly builds: ArtifactBuilds;
  /** The guest kernel's .deb, pinned to the recorded version unless the kernel is rebuilt. */
  readonly kernelPackage: KernelPackage;
  /** Artifacts to check and build (`only`). */
  readonly targets: ReadonlySet<ArtifactName>;
  /** Artifacts to rebuild even when up to date. */
  readonly rebuild: ReadonlySet<ArtifactName>;
  /** What this run built, in order, for the last line. */
  readonly built: ArtifactName[];
  readonly installPackages: boolean;
  readonly agentDir: string;
  /** Whether the caller named agentDir (then a missing bundle is an error, not built here). */
  readonly agentDirGiven: boolean;
}

/** One numbered step: `setup: [i/6] <name>: ...`. */
export interface SetupStep {
  readonly name: string;
  /** The artifact the step serves: when it is not among the targets, the step is skipped. */
  readonly serves?: ArtifactName;
  readonly run: (run: SetupRun, step: StepProgress) => Promise<void>;
}

/** The steps, in order (the last only when its rootfs is asked for). */
export const SETUP_STEPS: readonly SetupStep[] = [
  { name: "host packages", run: hostPackages },
  { name: "agent bundle", serves: "agent-drive", run: agentBundle },
  { name: "kernel", serves: "kernel", run: kernel },
  { name: "initramfs", serves: "initramfs", run: initramfs },
  { name: "agent drive", serves: "agent-drive", run: agentDrive },
  { name: "base rootfs", serves: "base-rootfs", run: baseRootfs },
  {
    name: "code interpreter rootfs",
    serves: "code-interpreter-rootfs",
    run: codeInterpreterRootfs,
  },
];

/** 1. The Debian packages, and a QEMU recent enough. */
async function hostPackages(run: SetupRun, step: StepProgress): Promise<void> {
  if (!run.installPackages) {
    step.done("skipped (installPackages: false)", 0);
    return;
  }
  const t = performance.now();
  const missing = await missingPackages(run.runner, HOST_PACKAGES);
  if (missing.length === 0) step.done(`all ${HOST_PACKAGES.length} present`, performance.now() - t);
  else await step.task(`apt-get install ${missing.join(" ")}`, () => run.apt.install(missing));
  if (!isRecentEnough(await installedQemuVersion(run.runner)))
    await step.task("installing QEMU", () => installQemu(run.runner, run.apt));
}

/** 2. The agent bundle that goes onto the agent drive, built from this checkout when missing. */
async function agentBundle(run: SetupRun, step: StepProgress): Promise<void> {
  const t = performance.now();
  if (existsSync(join(run.agentDir, "envd.mjs"))) {
    step.done(`${run.agentDir} present`, performance.now() - t);
    return;
  }
  const script = join(REPO_ROOT, "scripts", "build.mjs");
  if (run.agentDirGiven || !existsSync(script))
    throw new WarrenError("not_found", `${run.agentDir}/envd.mjs is missing: run npm run build`);
  await step.task("building it (node scripts/build.mjs)", () =>
    run.runner.run(process.execPath, [script], { cwd: REPO_ROOT }),
  );
}

/** 3. The kernel, from one pinned linux-image .deb. */
async function kernel(run: SetupRun, step: StepProgress): Promise<void> {
  const t = performance.now();
  const ref = await kernelRef(run.kernelPackage, step);
  const spec = kernelSpec({ path: run.layout.kernel, ref, kernelPackage: run.kernelPackage });
  await ensureArtifact(run, step, spec, kernelRelease(ref.name), t);
}

/** 4. The initramfs, with the modules of the same .deb. */
async function initramfs(run: SetupRun, step: StepProgress): Promise<void> {
  const t = performance.now();
  const ref = await kernelRef(run.kernelPackage, step);
  await assertStatic(BUSYBOX_STATIC, "busybox-static");
  const busybox = { path: BUSYBOX_STATIC, sha256: (await run.hashes.hash(BUSYBOX_STATIC)) ?? "" };
  const spec = initramfsSpec({
    path: run.layout.initramfs,
    ref,
    kernelPackage: run.kernelPackage,
    busybox,
    runner: run.runner,
  });
  await ensureArtifact(run, step, spec, `initramfs for ${kernelRelease(ref.name)}`, t);
}

/** The kernel package, saying so when it must be resolved and downloaded first. */
async function kernelRef(
  kernelPackage: KernelPackage,
  step: StepProgress,
): Promise<KernelPackageRef> {
  if (!kernelPackage.resolved)
    await step.task(`resolving ${CLOUD_KERNEL_METAPACKAGE} and downloading it`, () =>
      kernelPackage.ref(),
    );
  return kernelPackage.ref();
}

/** 5. The agent drive. */
async function agentDrive(run: SetupRun, step: StepProgress): Promise<void> {
  const t = performance.now();
  await assertStatic(BUSYBOX_STATIC, "busybox-static");
  await assertStatic(TINI_STATIC, "tini");
  const spec = await agentDriveSpec({
    path: run.layout.agentDrive,
    sources: {
      agentDir: run.agentDir,
      node: process.execPath,
      busybox: BUSYBOX_STATIC,
      tini: TINI_STATIC,
      resize2fs: "/sbin/resize2fs",
    },
    runner: run.runner,
    hashes: run.hashes,
    step,
    previous: run.builds.record("agent-drive"),
  });
  await ensureArtifact(run, step, spec, "agent.ext4", t);
}

/** 6. The base rootfs, on a cached debootstrap tarball. */
async function baseRootfs(run: SetupRun, step: StepProgress): Promise<void> {
  await ensureRootfs(run, step, BASE_ROOTFS, run.layout.baseRootfs);
}

/** 7. The code-interpreter-v1 template's rootfs, on the same tarball. */
async function codeInterpreterRootfs(run: SetupRun, step: StepProgress): Promise<void> {
  await ensureRootfs(run, step, CODE_INTERPRETER_ROOTFS, run.layout.codeInterpreterRootfs);
}

async function ensureRootfs(
  run: SetupRun,
  step: StepProgress,
  recipe: typeof BASE_ROOTFS,
  path: string,
): Promise<void> {
  const { builds, layout, runner } = run;
  const mirrors = debianMirrors(await hostAptSources(), DEBIAN_SUITE);
  const tarball = debootstrapSpec({
    path: join(
      layout.cacheDir,
      `debootstrap-${DEBIAN_SUITE}-${DEBOOTSTRAP_VARIANT}-${DEBIAN_ARCH}.tar.zst`,
    ),
    mirror: mirrors.archive,
    runner,
  });
  const spec = rootfsSpec({
    recipe,
    path,
    mirrors,
    runner,
    step,
    debootstrap: async () => {
      const reason = await builds.staleReason(tarball, run.rebuild.has("debootstrap"));
      if (!reason) step.done("debootstrap tarball cached", 0);
      else {
        await step.task(`debootstrap ${DEBIAN_SUITE} from ${mirrors.archive} (${reason})`, () =>
          builds.build(tarball),
        );
        run.built.push("debootstrap");
      }
      return tarball.path;
    },
  });
  await ensureArtifact(run, step, spec, basename(path));
}

/** Reuses or rebuilds one artifact, saying which and why. */
async function ensureArtifact(
  run: SetupRun,
  step: StepProgress,
  spec: ArtifactSpec,
  what: string,
  started = performance.now(),
): Promise<ArtifactRecord> {
  const reason = await run.builds.staleReason(spec, run.rebuild.has(spec.name));
  const existing = run.builds.record(spec.name);
  if (!reason && existing) {
    step.done(`${what} up to date`, performance.now() - started);
    return existing;
  }
  step.info(`building ${what} (${reason})`);
  const record = await run.builds.build(spec);
  run.built.push(spec.name);
  const mib = (record.sizeBytes / (1024 * 1024)).toFixed(1);
  step.done(`built ${record.file}, ${mib} MiB`, performance.now() - started);
  return record;
}
