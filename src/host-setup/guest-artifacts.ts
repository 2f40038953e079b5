import { createHash } from "node:crypto";
import { stat } from "node:fs/promises";
import { join } from "node:path";
import { WarrenError } from "../shared/index.js";
import { defaultImagesDir, imagesLayout } from "./layout.js";
import { type ArtifactName, type Manifest, readManifest } from "./manifest.js";

/** What the VMM driver boots (docs/guest-boot.md): absolute paths, plus the kernel release. */
export interface GuestArtifacts {
  readonly kernel: string;
  readonly initramfs: string;
  /** Attached read-only to every VM (/dev/vdb, mounted at /.warren). */
  readonly agentDrive: string;
  /** Backing file of every VM's root overlay; never written. */
  readonly baseRootfs: string;
  /** `uname -r` of the guest kernel, e.g. 6.1.0-57-cloud-amd64 (for snapshot metadata). */
  readonly kernelVersion: string;
  /** Kernel flags every guest boots with, besides Warren's own (console, root, addresses). */
  readonly kernelArgs: string;
  /**
   * Identifies this exact set of the four artifacts and kernel flags (from their recorded
   * sha256s). A snapshot
   * remembers it: its guest has cached blocks of the agent drive and its disk chain ends at
   * the base rootfs, so a rebuilt artifact must make old snapshots refuse to restore.
   */
  readonly fingerprint: string;
  /** images/manifest.json: recipe, input and output hashes of each artifact. */
  readonly manifest: string;
  /**
   * The code-interpreter-v1 template's rootfs when setup built it: a template captured on it
   * is stale once the image's sha256 differs.
   */
  readonly codeInterpreterRootfs?: { readonly path: string; readonly sha256: string };
}

/**
 * Keep an idle guest quiet: under TCG every guest wakeup costs host CPU. TSC is the guest's
 * clocksource either way; without `tsc=reliable` the kernel checks it against another clock
 * twice a second, forever. `nowatchdog` drops the soft-lockup detector's timer.
 */
export const GUEST_KERNEL_ARGS = "tsc=reliable nowatchdog";

/** The four artifacts a VM boots from, in the order setup builds them. */
export const GUEST_ARTIFACTS: readonly ArtifactName[] = [
  "kernel",
  "initramfs",
  "agent-drive",
  "base-rootfs",
];

/** The artifacts in images directory `imagesDir`, as its manifest records them. */
export function guestArtifactPaths(imagesDir: string, manifest: Manifest): GuestArtifacts {
  const layout = imagesLayout(imagesDir);
  const hashes = GUEST_ARTIFACTS.map(
    (name) => `${name}:${manifest.artifacts[name]?.sha256 ?? "missing"}`,
  );
  hashes.push(`kernel-args:${GUEST_KERNEL_ARGS}`);
  const kernelVersion = manifest.artifacts.kernel?.details.kernelRelease ?? "";
  const interpreter = manifest.artifacts["code-interpreter-rootfs"];
  return {
    ...(interpreter && {
      codeInterpreterRootfs: { path: layout.codeInterpreterRootfs, sha256: interpreter.sha256 },
    }),
    fingerprint: createHash("sha256").update(hashes.join("\n")).digest("hex").slice(0, 16),
    kernelArgs: GUEST_KERNEL_ARGS,
    kernel: layout.kernel,
    initramfs: layout.initramfs,
    agentDrive: layout.agentDrive,
    baseRootfs: layout.baseRootfs,
    kernelVersion,
    manifest: layout.manifest,
  };
}

/**
 * The artifacts a previous setup built, for a server that must not build (or is not root):
 * checks that each is recorded and on disk with its recorded size, without hashing it.
 */
export async function loadGuestArtifacts(
  dataDir: string,
  imagesDir = defaultImagesDir(dataDir),
): Promise<GuestArtifacts> {
  const layout = imagesLayout(imagesDir);
  const manifest = await readManifest(layout.manifest);
  for (const name of GUEST_ARTIFACTS) {
    const record = manifest.artifacts[name];
    const size = record && (await stat(join(layout.dir, record.file)).catch(() => undefined))?.size;
    if (!record || size !== record.sizeBytes)
      throw new WarrenError(
        "not_found",
        `guest artifact ${name} is missing or incomplete in ${layout.dir}: run \`npm run setup\` as root`,
      );
  }
  return guestArtifactPaths(imagesDir, manifest);
}
