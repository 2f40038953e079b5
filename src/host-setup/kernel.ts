import { copyFile, readFile } from "node:fs/promises";
import { join } from "node:path";
import type { ArtifactSpec } from "./artifact-builds.js";
import type { CommandRunner } from "./command.js";
import { sha256Text } from "./file-hash.js";
import { buildInitramfs, INITRAMFS_RECIPE } from "./initramfs.js";
import { INITRAMFS_INIT } from "./initramfs-init.js";
import {
  GUEST_MODULES,
  parseKernelConfig,
  parseModulesDep,
  parseSoftdeps,
  planModules,
} from "./kernel-modules.js";
import { type KernelPackage, type KernelPackageRef, kernelRelease } from "./kernel-package.js";

/** Bump when the way vmlinuz is taken from the package changes. */
export const KERNEL_RECIPE = 1;

/** vmlinuz, copied out of the pinned linux-image .deb. */
export function kernelSpec(options: {
  path: string;
  ref: KernelPackageRef;
  kernelPackage: KernelPackage;
}): ArtifactSpec {
  const { ref } = options;
  const release = kernelRelease(ref.name);
  return {
    name: "kernel",
    path: options.path,
    recipe: KERNEL_RECIPE,
    inputs: { package: ref.name, version: ref.version },
    async build(output) {
      const root = await options.kernelPackage.unpacked();
      await copyFile(join(root, "boot", `vmlinuz-${release}`), output);
      return { kernelRelease: release, package: ref.name, version: ref.version };
    },
  };
}

/**
 * initramfs.cpio.gz for the same kernel package: the modules the kernel's config says are
 * modular (GUEST_MODULES: virtio_mmio, virtio_blk, virtio_net, ext4, rng_core, virtio_rng)
 * and everything they depend on.
 */
export function initramfsSpec(options: {
  path: string;
  ref: KernelPackageRef;
  kernelPackage: KernelPackage;
  busybox: { path: string; sha256: string };
  runner: CommandRunner;
}): ArtifactSpec {
  const { ref, runner } = options;
  const release = kernelRelease(ref.name);
  return {
    name: "initramfs",
    path: options.path,
    recipe: INITRAMFS_RECIPE,
    inputs: {
      package: ref.name,
      version: ref.version,
      busybox: options.busybox.sha256,
      init: sha256Text(INITRAMFS_INIT),
      modules: GUEST_MODULES.map((m) => m.name).join(" "),
    },
    async build(output) {
      const root = await options.kernelPackage.unpacked();
      const modulesDir = join(root, "lib", "modules", release);
      // The .deb has no modules.dep (its postinst would run depmod): make one.
      await runner.run("depmod", ["-b", root, release]);
      const read = (path: string) => readFile(path, "utf8").catch(() => "");
      const plan = planModules(
        parseKernelConfig(await read(join(root, "boot", `config-${release}`))),
        parseModulesDep(await read(join(modulesDir, "modules.dep"))),
        parseSoftdeps(await read(join(modulesDir, "modules.softdep"))),
      );
      await buildInitramfs({
        output,
        modulesDir,
        modules: plan.load,
        busybox: options.busybox.path,
        runner,
      });
      return {
        kernelRelease: release,
        modules: plan.load.map((m) => m.name).join(" "),
        builtin: plan.builtin.join(" "),
      };
    },
  };
}
