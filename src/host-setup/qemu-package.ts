import { readFile, writeFile } from "node:fs/promises";
import type { Apt } from "./apt.js";
import type { CommandRunner } from "./command.js";

/**
 * The oldest QEMU Warren runs: 8.2 added `rom=off` (a restored VM maps its snapshot's memory
 * image privately from a read-only descriptor, so an escaped VMM cannot write a template),
 * and `-run-with user=,chroot=` replaces `-runas`/`-chroot`. Debian 12 ships 7.2; its
 * backports carry 10.0, the version Warren is tested with.
 */
export const QEMU_MIN_VERSION: readonly [number, number] = [10, 0];
export const QEMU_PACKAGES = ["qemu-system-x86", "qemu-utils"] as const;

const BACKPORTS_LIST = "/etc/apt/sources.list.d/warren-backports.list";

/** `QEMU emulator version 10.0.2 (Debian …)` → [10, 0]; undefined when not recognised. */
export function parseQemuVersion(banner: string): [number, number] | undefined {
  const match = /version (\d+)\.(\d+)/.exec(banner);
  return match ? [Number(match[1]), Number(match[2])] : undefined;
}

export function isRecentEnough(version: readonly [number, number] | undefined): boolean {
  if (!version) return false;
  const [major, minor] = version;
  return (
    major > QEMU_MIN_VERSION[0] || (major === QEMU_MIN_VERSION[0] && minor >= QEMU_MIN_VERSION[1])
  );
}

/** The installed QEMU's version, or undefined when there is none. */
export async function installedQemuVersion(
  runner: CommandRunner,
): Promise<[number, number] | undefined> {
  // Not installed at all: spawning it fails (ENOENT) rather than exiting non-zero.
  const result = await runner
    .run("qemu-system-x86_64", ["--version"], { allowFailure: true })
    .catch(() => undefined);
  return result?.code === 0 ? parseQemuVersion(result.stdout) : undefined;
}

/** The host's Debian codename (`bookworm`), or undefined on anything else. */
async function debianCodename(): Promise<string | undefined> {
  const text = await readFile("/etc/os-release", "utf8").catch(() => "");
  return /^VERSION_CODENAME=(\w+)$/m.exec(text)?.[1];
}

/**
 * Installs QEMU (when missing or older than QEMU_MIN_VERSION): from the release itself where
 * it is recent enough, from `<codename>-backports` on Debian 12. Says what it installed.
 */
export async function installQemu(runner: CommandRunner, apt: Apt): Promise<string> {
  const codename = await debianCodename();
  if (codename === "bookworm") {
    await writeFile(BACKPORTS_LIST, "deb http://deb.debian.org/debian bookworm-backports main\n");
    await apt.update();
    await apt.install(QEMU_PACKAGES, { release: "bookworm-backports" });
  } else {
    await apt.install(QEMU_PACKAGES);
  }
  const now = await installedQemuVersion(runner);
  if (!isRecentEnough(now))
    throw new Error(
      `QEMU ${QEMU_MIN_VERSION.join(".")} or newer is needed; this host's packages give ${now?.join(".") ?? "none"}`,
    );
  return `QEMU ${now?.join(".")}${codename === "bookworm" ? " (bookworm-backports)" : ""}`;
}
