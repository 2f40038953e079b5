import type { CommandRunner } from "./command.js";

/** Debian packages Warren runs or builds its guest artifacts with. */
export const HOST_PACKAGES: readonly string[] = [
  // QEMU itself (qemu-system-x86, qemu-utils) comes through qemu-package.ts: it needs a
  // newer one than Debian 12 has.
  "debootstrap", // the base rootfs
  "busybox-static", // initramfs and agent drive tools
  "tini", // tini-static: PID 1 in the guest
  "iptables", // network slots: NAT and egress rules
  "iproute2", // network slots: netns, veth, tap
  "conntrack", // network slots: a reused slot forgets its last tenant's connections
  "e2fsprogs", // mkfs.ext4 -d: images without loop mounts
  "kmod", // depmod: module dependencies of the guest kernel
  "xz-utils", // compressed kernel modules, if a kernel ships them so
  "zstd", // the cached debootstrap tarball
  "debian-archive-keyring", // debootstrap verifies the Debian archive with it
];

/** The packages of `names` that dpkg does not report as installed ("ii"). */
export async function missingPackages(
  runner: CommandRunner,
  names: readonly string[],
): Promise<string[]> {
  const { stdout } = await runner.run(
    "dpkg-query",
    ["-W", `-f=\${Package}\\t\${db:Status-Abbrev}\\n`, ...names],
    { allowFailure: true },
  );
  const installed = new Set(
    stdout
      .split("\n")
      .map((line) => line.split("\t"))
      .filter(([, status]) => status?.startsWith("ii"))
      .map(([name]) => name),
  );
  return names.filter((name) => !installed.has(name));
}
