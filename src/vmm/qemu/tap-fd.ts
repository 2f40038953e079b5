import { loadAddon } from "../../shared/load-addon.js";
import { VmmError } from "../errors.js";

interface TapFdAddon {
  openTap(netnsPath: string, name: string): number;
}

let addon: TapFdAddon | undefined;

/** Where `ip netns` mounts the named network namespaces. */
export const NETNS_DIR = "/run/netns";

/**
 * An open descriptor on the tap `name` in the named network namespace (`<netnsDir>/<netns>`,
 * `ip netns`'s by default), close-on-exec, for QEMU's `-netdev tap,fd=`: QEMU itself then
 * runs in an empty network namespace (see native/tapfd/tapfd.c). Root only (setns).
 */
export function openTap(netns: string, name: string, vmId: string, netnsDir = NETNS_DIR): number {
  addon ??= loadAddon<TapFdAddon>("tapfd", import.meta.url);
  try {
    return addon.openTap(`${netnsDir}/${netns}`, name);
  } catch (err) {
    throw new VmmError(`cannot open the VM's tap: ${(err as Error).message}`, vmId, {
      cause: err,
    });
  }
}
