import { Buffer } from "node:buffer";
import { lstat, readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { ensurePrivateDir } from "../../shared/private-dir.js";
import { VmmError } from "../errors.js";

/**
 * Where QEMU binds each VM's QMP socket: `<dir>/<vm id>.sock`, in a directory of root's,
 * mode 0700. QEMU binds it while still root, before `-run-with` drops it to the VM's uid and
 * chroots it into its runtime directory, so nothing in a jail (an escaped VMM included) can
 * reach, replace or plant a link at the path a server connects to, now or when a later
 * server reconnects to a VM it did not start. (In the VMM's own runtime directory, the
 * socket's name was the VMM's to replace.)
 */

/** sun_path holds 108 bytes, the terminating NUL included. */
const MAX_SOCKET_PATH = 107;
const SOCKET_SUFFIX = ".sock";

/** Makes `dir` (0700) or checks it: a directory, not a link, of this process's uid, 0700. */
export function ensureQmpDir(dir: string): Promise<void> {
  return ensurePrivateDir(dir, (message) => new VmmError(message), "QMP directory");
}

/** The socket of VM `vmId` in `dir`; refuses an id that is not a plain name. */
export function qmpSocketPath(dir: string, vmId: string): string {
  if (!/^[A-Za-z0-9][A-Za-z0-9_-]*$/.test(vmId))
    throw new VmmError(`VM id ${JSON.stringify(vmId)} cannot name a QMP socket`);
  const path = join(dir, `${vmId}${SOCKET_SUFFIX}`);
  if (Buffer.byteLength(path) > MAX_SOCKET_PATH)
    throw new VmmError(`QMP socket path ${path} is longer than ${MAX_SOCKET_PATH} bytes`, vmId);
  return path;
}

/** Checks that `path` is a socket of this process's uid (what QEMU bound as root). */
export async function checkQmpSocket(path: string, vmId: string): Promise<void> {
  const info = await lstat(path).catch((err: NodeJS.ErrnoException) => {
    throw new VmmError(`QMP socket ${path}: ${err.code ?? err.message}`, vmId, { cause: err });
  });
  const uid = process.getuid?.() ?? 0;
  if (!info.isSocket() || info.uid !== uid)
    throw new VmmError(`QMP socket ${path} is not a socket of uid ${uid}`, vmId);
}

/**
 * Removes every socket left in `dir` (their QEMUs are gone) but those of the VMs in `keep`;
 * returns how many.
 */
export async function removeQmpSockets(
  dir: string,
  keep: ReadonlySet<string> = new Set(),
): Promise<number> {
  let removed = 0;
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    if (!name.endsWith(SOCKET_SUFFIX) || keep.has(name.slice(0, -SOCKET_SUFFIX.length))) continue;
    await rm(join(dir, name), { force: true });
    removed += 1;
  }
  return removed;
}
