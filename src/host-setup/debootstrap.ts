import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import type { ArtifactSpec } from "./artifact-builds.js";
import type { CommandRunner } from "./command.js";

/** Bump when the debootstrap invocation changes. */
export const DEBOOTSTRAP_RECIPE = 1;

export const DEBIAN_SUITE = "bookworm";
export const DEBOOTSTRAP_VARIANT = "minbase";
export const DEBIAN_ARCH = "amd64";

/** GNU tar options that keep owners by number, xattrs (file capabilities) and ACLs. */
export const TAR_KEEP = ["--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls"];

/**
 * `debootstrap --variant=minbase bookworm`, cached as a tarball in the images cache, so that
 * changing what is installed on top does not redo the ~40 s bootstrap. It runs in its own
 * mount namespace: the /proc and /sys it mounts in the target vanish with it, even on a crash.
 */
export function debootstrapSpec(options: {
  path: string;
  mirror: string;
  runner: CommandRunner;
}): ArtifactSpec {
  const { runner } = options;
  return {
    name: "debootstrap",
    path: options.path,
    recipe: DEBOOTSTRAP_RECIPE,
    inputs: { suite: DEBIAN_SUITE, variant: DEBOOTSTRAP_VARIANT, arch: DEBIAN_ARCH },
    async build(output, workDir) {
      const root = join(workDir, "root");
      await mkdir(root);
      await runner.run("unshare", [
        "--mount",
        "--propagation",
        "private",
        "--",
        "debootstrap",
        `--variant=${DEBOOTSTRAP_VARIANT}`,
        `--arch=${DEBIAN_ARCH}`,
        DEBIAN_SUITE,
        root,
        options.mirror,
      ]);
      await runner.run("tar", ["--zstd", ...TAR_KEEP, "-C", root, "-cf", output, "."]);
      return { mirror: options.mirror };
    },
  };
}
