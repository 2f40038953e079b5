import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { GuestArtifacts } from "../../src/host-setup/index.js";

/**
 * Guest images for a node on the fake VMM driver: only the base template's rootfs is read (its
 * size, a copy for builds), so only it is a file, written in `dir`; the rest are names.
 */
export async function fakeGuestImages(dir: string, label = "fake"): Promise<GuestArtifacts> {
  const baseRootfs = join(dir, "base-rootfs.img");
  await writeFile(baseRootfs, Buffer.alloc(4096));
  return {
    kernel: `/${label}/vmlinuz`,
    initramfs: `/${label}/initramfs`,
    agentDrive: `/${label}/agent-drive`,
    baseRootfs,
    kernelVersion: `6.1.0-${label}`,
    kernelArgs: "",
    fingerprint: `${label}-images-1`,
    manifest: `/${label}/manifest.json`,
  };
}
