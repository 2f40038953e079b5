import { posix } from "node:path";
import { CODE_INTERPRETER_MARKER, INTERPRETER_PORT } from "../protocol/index.js";
import type { DebianMirrors } from "./apt-sources.js";

/** What E2B's `base` template offers (../shared/E2B-PROTOCOL.md §6), from Debian. */
export const BASE_PACKAGES: readonly string[] = [
  "bash",
  "python3",
  "python-is-python3",
  "python3-pip",
  "git",
  "curl",
  "ca-certificates",
  "sudo",
  "procps",
  "iproute2",
  "ncurses-bin",
  "nodejs",
  "npm",
  "less",
];

/**
 * What the code-interpreter-v1 template adds to base (issue 28: E2B's code interpreter
 * template), from Debian: IPython for the Python kernel and the data stack its users import.
 * Node.js for JavaScript comes with base.
 */
export const CODE_INTERPRETER_PACKAGES: readonly string[] = [
  "python3-ipython",
  "python3-matplotlib",
  "python3-matplotlib-inline",
  "python3-numpy",
  "python3-pandas",
  "python3-scipy",
  "python3-sklearn",
  "python3-sympy",
  "python3-pil",
  "python3-requests",
  "python3-bs4",
  "python3-openpyxl",
  "fonts-dejavu-core",
  // R: the driver (warren_kernel.R) needs jsonlite and evaluate.
  "r-base-core",
  "r-cran-jsonlite",
  "r-cran-evaluate",
];

/** Turns envd's code interpreter on in the rootfs (its marker file). */
export const CODE_INTERPRETER_SCRIPT = `mkdir -p ${posix.dirname(CODE_INTERPRETER_MARKER)}
echo "envd serves E2B's code interpreter on port ${INTERPRETER_PORT}" >${CODE_INTERPRETER_MARKER}
`;

export const GUEST_USER = "user";
export const GUEST_HOSTNAME = "sandbox";

/** /etc/apt/sources.list.d/debian.sources of the guest: the mirrors it was built from. */
export function guestAptSources(mirrors: DebianMirrors, suite: string): string {
  const keyring = "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg";
  return [
    `Types: deb\nURIs: ${mirrors.archive}\nSuites: ${suite} ${suite}-updates\nComponents: main\n${keyring}\n`,
    `Types: deb\nURIs: ${mirrors.security}\nSuites: ${suite}-security\nComponents: main\n${keyring}\n`,
  ].join("\n");
}

/**
 * Runs as root inside the chroot of the bootstrapped tree (sh -s): installs BASE_PACKAGES
 * without recommends, creates `user` (home /home/user, bash, passwordless sudo, no password,
 * like E2B's finalize step), sets hostname, hosts and umask, and removes caches, apt lists,
 * logs and the build host's resolv.conf (the guest init writes its own).
 */
export function baseRootfsScript(
  packages: readonly string[],
  aptSources: string,
  extra = "",
): string {
  return `set -eu
export DEBIAN_FRONTEND=noninteractive LC_ALL=C PATH=/usr/sbin:/usr/bin:/sbin:/bin
rm -f /etc/apt/sources.list
cat >/etc/apt/sources.list.d/debian.sources <<'SOURCES'
${aptSources}SOURCES
# No service may start inside the chroot.
printf '#!/bin/sh\\nexit 101\\n' >/usr/sbin/policy-rc.d
chmod 755 /usr/sbin/policy-rc.d
apt-get -q update
apt-get -q install -y --no-install-recommends ${packages.join(" ")}
apt-get clean
rm -f /usr/sbin/policy-rc.d

useradd --create-home --shell /bin/bash ${GUEST_USER}
usermod -aG sudo ${GUEST_USER}
passwd -d ${GUEST_USER} >/dev/null
passwd -d root >/dev/null
echo '${GUEST_USER} ALL=(ALL:ALL) NOPASSWD: ALL' >/etc/sudoers.d/${GUEST_USER}
chmod 440 /etc/sudoers.d/${GUEST_USER}
# E2B's base lets \`user\` install globally with npm and pip, as in its Docker image.
chmod -R a+rwX /usr/local
printf '[global]\\nbreak-system-packages = true\\n' >/etc/pip.conf

echo ${GUEST_HOSTNAME} >/etc/hostname
cat >/etc/hosts <<'HOSTS'
127.0.0.1	localhost
127.0.1.1	${GUEST_HOSTNAME}
::1	localhost ip6-localhost ip6-loopback
ff02::1	ip6-allnodes
ff02::2	ip6-allrouters
HOSTS
sed -i 's/^UMASK.*/UMASK\t\t022/' /etc/login.defs
# Every command the SDK runs is \`bash -l -c\`: bash knows its EUID, so /etc/profile need not
# fork \`id -u\` (~20 ms under TCG); sh (dash) still asks id.
sed -i 's/"$(id -u)"/"\${EUID:-$(id -u)}"/' /etc/profile
printf '# Warren guests mount their filesystems in the initramfs and /.warren/init.\\n' >/etc/fstab
${extra}
rm -f /etc/resolv.conf
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/debconf/*-old /var/lib/dpkg/*-old
rm -rf /tmp/* /var/tmp/* /root/.cache
find /var/log -type f -exec truncate -s 0 {} +
`;
}
