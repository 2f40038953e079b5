import { mkdir, readFile } from "node:fs/promises";
import { isAbsolute, normalize } from "node:path";
import { type EnvdVolumeMount, VOLUME_NFS_PORT } from "../protocol/index.js";
import { WarrenError } from "../shared/index.js";
import { system } from "./native/system.js";

/** More than any sandbox needs; bounds what one /init can make envd do. */
const MAX_MOUNTS = 32;
const MAX_PATH = 1024;
/** `<IPv4>:/<export>`: Warren's server exports volumes by id (letters, digits, `-`). */
const NFS_TARGET = /^((?:\d{1,3}\.){3}\d{1,3}):(\/[A-Za-z0-9._-]{1,128})$/;

/** One mount /init asks for, checked. */
export interface VolumeMount {
  readonly server: string;
  readonly exportPath: string;
  readonly path: string;
}

/** Mounts one NFS export at a path (the guest's mount(2); a stand-in in tests). */
export type VolumeMounter = (mount: VolumeMount) => Promise<void>;

/** /init's `volumeMounts`: undefined when absent, else each entry checked. */
export function parseVolumeMounts(value: unknown): VolumeMount[] | undefined {
  if (value === undefined || value === null) return undefined;
  if (!Array.isArray(value) || value.length > MAX_MOUNTS)
    throw invalid(`volumeMounts must be an array of at most ${MAX_MOUNTS} mounts`);
  const mounts = value.map((entry: unknown, i) => {
    const { nfs_target: target, path } = (entry ?? {}) as Partial<EnvdVolumeMount>;
    const parsed = typeof target === "string" ? NFS_TARGET.exec(target) : null;
    if (!parsed) throw invalid(`volumeMounts[${i}].nfs_target must be <IPv4 address>:/<export>`);
    if (
      typeof path !== "string" ||
      !isAbsolute(path) ||
      path.length > MAX_PATH ||
      path.includes("\0")
    )
      throw invalid(`volumeMounts[${i}].path must be an absolute path`);
    const clean = normalize(path).replace(/(.)\/$/, "$1");
    if (clean === "/") throw invalid(`volumeMounts[${i}].path cannot be /`);
    return { server: parsed[1] as string, exportPath: parsed[2] as string, path: clean };
  });
  const paths = new Set(mounts.map((m) => m.path));
  if (paths.size !== mounts.length) throw invalid("volumeMounts has a path twice");
  return mounts;
}

/**
 * Mounts each volume not mounted already. A resumed or forked guest keeps its mounts in its
 * kernel (the host serves them again behind the same address), so /init after a restore
 * finds them all there and does nothing.
 */
export async function applyVolumeMounts(
  mounts: readonly VolumeMount[],
  mount: VolumeMounter,
): Promise<number> {
  const mounted = await nfsMountPoints();
  let added = 0;
  for (const m of mounts) {
    if (mounted.has(m.path)) continue;
    await mount(m);
    added++;
  }
  return added;
}

/**
 * NFSv3 over TCP to Warren's server on the gateway: no portmapper (ports given), no lock
 * manager (`nolock`: locks stay local to the guest, as with E2B's volumes), `hard` so a
 * server restarted behind a resume or a fork is waited for rather than failing calls, and
 * attributes cached 1 s (`actimeo=1`) so that sandboxes sharing a volume see each other's new
 * files within a second, not the 30–60 s of the defaults.
 */
export function nfsOptions(server: string): string {
  const port = VOLUME_NFS_PORT;
  return [
    "vers=3",
    "proto=tcp",
    `port=${port}`,
    `mountport=${port}`,
    "mountproto=tcp",
    "nolock",
    "hard",
    "actimeo=1",
    `addr=${server}`,
    `mountaddr=${server}`,
  ].join(",");
}

/** mount(2): source, target, filesystem type, its text options, MS_* flags. */
export type MountCall = (
  source: string,
  target: string,
  fstype: string,
  options: string,
  flags: number,
) => Promise<void>;

const MS_NOSUID = 0x2;
const MS_NODEV = 0x4;
/**
 * Flags of every volume mount: a volume is written by other sandboxes' root, so a set-uid
 * program or a device node found there must grant nothing in this guest (the server also
 * never stores nor shows set-uid bits, and makes no device node: src/volumes/nfs/nfs3.ts).
 */
export const VOLUME_MOUNT_FLAGS = MS_NOSUID | MS_NODEV;

/** The agent's addon's mount(2), which takes the MS_* flags as its fifth argument. */
const systemMount: MountCall = (source, target, fstype, options, flags) =>
  (system().mount as MountCall)(source, target, fstype, options, flags);

/** A mounter: the mount point made (root's, 0755) when missing, then mount(2) with its flags. */
export function guestMounter(mount: MountCall = systemMount): VolumeMounter {
  return async (m) => {
    await mkdir(m.path, { recursive: true, mode: 0o755 });
    const source = `${m.server}:${m.exportPath}`;
    try {
      await mount(source, m.path, "nfs", nfsOptions(m.server), VOLUME_MOUNT_FLAGS);
    } catch (err) {
      throw new WarrenError(
        "internal",
        `cannot mount the volume at ${m.path}: ${(err as Error).message}`,
      );
    }
  };
}

/** The guest's mounter (mount(2) through the agent's addon). */
export const mountGuestVolume: VolumeMounter = guestMounter();

/** Mount points of NFS mounts now (mountinfo's fifth field, octal escapes decoded). */
async function nfsMountPoints(): Promise<Set<string>> {
  const text = await readFile("/proc/self/mountinfo", "utf8").catch(() => "");
  const points = new Set<string>();
  for (const line of text.split("\n")) {
    const [mountInfo, fsInfo] = line.split(" - ");
    const fsType = fsInfo?.split(" ")[0];
    const point = mountInfo?.split(" ")[4];
    if (point && (fsType === "nfs" || fsType === "nfs4"))
      points.add(
        point.replace(/\\([0-7]{3})/g, (_, octal: string) =>
          String.fromCharCode(Number.parseInt(octal, 8)),
        ),
      );
  }
  return points;
}

function invalid(message: string): WarrenError {
  return new WarrenError("invalid_argument", message);
}
