import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import type { DebianMirrors } from "./apt-sources.js";
import type { ArtifactSpec } from "./artifact-builds.js";
import {
  BASE_PACKAGES,
  baseRootfsScript,
  CODE_INTERPRETER_PACKAGES,
  CODE_INTERPRETER_SCRIPT,
  GUEST_USER,
  guestAptSources,
} from "./base-rootfs-script.js";
import type { CommandRunner } from "./command.js";
import { DEBIAN_SUITE, DEBOOTSTRAP_RECIPE, DEBOOTSTRAP_VARIANT, TAR_KEEP } from "./debootstrap.js";
import { makeExt4Image } from "./ext4-image.js";
import { sha256Text } from "./file-hash.js";
import type { StepProgress } from "./progress.js";

/** Bump when the rootfs recipe changes in a way the script text does not show. */
export const BASE_ROOTFS_RECIPE = 1;

const GiB = 1024 * 1024 * 1024;

/** Runs a script as root inside `root`, with /proc mounted in a private mount namespace. */
async function inChroot(runner: CommandRunner, root: string, script: string): Promise<void> {
  await runner.run(
    "unshare",
    [
      "--mount",
      "--propagation",
      "private",
      "--",
      "sh",
      "-c",
      'mount -t proc proc "$1/proc" && exec chroot "$1" /bin/sh -s',
      "sh",
      root,
    ],
    { input: script },
  );
}

/** One rootfs recipe: a name, its packages on top of debootstrap, and script lines of its own. */
interface RootfsRecipe {
  readonly name: "base-rootfs" | "code-interpreter-rootfs";
  readonly packages: readonly string[];
  readonly extraScript: string;
}

export const BASE_ROOTFS: RootfsRecipe = {
  name: "base-rootfs",
  packages: BASE_PACKAGES,
  extraScript: "",
};

/** base plus the code interpreter's packages and marker: the code-interpreter-v1 template's disk. */
export const CODE_INTERPRETER_ROOTFS: RootfsRecipe = {
  name: "code-interpreter-rootfs",
  packages: [...BASE_PACKAGES, ...CODE_INTERPRETER_PACKAGES],
  extraScript: CODE_INTERPRETER_SCRIPT,
};

/**
 * A rootfs image (base.ext4, code-interpreter.ext4): the debootstrap tarball unpacked, the
 * recipe's packages and `user` added in a chroot, then made into a sparse ext4 image with
 * ~1 GiB free. The mirror is not an input: the same recipe from another mirror gives the
 * same system.
 */
export function rootfsSpec(options: {
  recipe: RootfsRecipe;
  path: string;
  mirrors: DebianMirrors;
  runner: CommandRunner;
  step: StepProgress;
  /** Gives the debootstrap tarball, building it if needed (only called when building). */
  debootstrap: () => Promise<string>;
}): ArtifactSpec {
  const { runner, step, recipe } = options;
  const aptSources = guestAptSources(options.mirrors, DEBIAN_SUITE);
  const script = baseRootfsScript(recipe.packages, aptSources, recipe.extraScript);
  return {
    name: recipe.name,
    path: options.path,
    recipe: BASE_ROOTFS_RECIPE,
    inputs: {
      suite: DEBIAN_SUITE,
      variant: DEBOOTSTRAP_VARIANT,
      debootstrapRecipe: String(DEBOOTSTRAP_RECIPE),
      packages: recipe.packages.join(" "),
      // The script embeds the mirrors; hash it without them (see above).
      script: sha256Text(baseRootfsScript(recipe.packages, "", recipe.extraScript)),
    },
    async build(output, workDir) {
      const tarball = await options.debootstrap();
      const root = join(workDir, "root");
      await mkdir(root);
      await step.task("unpacking the debootstrap tarball", () =>
        runner.run("tar", ["--zstd", ...TAR_KEEP, "-C", root, "-xpf", tarball]),
      );
      await step.task(
        `installing ${recipe.packages.length} packages and user "${GUEST_USER}"`,
        () => inChroot(runner, root, script),
      );
      const size = await step.task("mkfs.ext4", () =>
        makeExt4Image({
          source: root,
          output,
          label: "warren-root",
          freeBytes: GiB,
          journal: true,
          runner,
        }),
      );
      return { sizeMiB: String(size / (1024 * 1024)), mirror: options.mirrors.archive };
    },
  };
}
