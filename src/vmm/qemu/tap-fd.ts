import { loadAddon } from "../../shared/load-addon.js";
import { VmmError } from "../errors.js";

interface TapFdAddon {
  openTap(netnsPath: string, name: string): number;
}

let addon: TapFdAddon | undefined;

/**
 * An open descriptor on the tap `name` in the named network namespace (`ip netns`'s
 * `/run/netns/<netns>`), close-on-exec, for QEMU's `-netdev tap,fd=`: QEMU itself then
 * runs in an empty network namespace (see native/tapfd/tapfd.c). Root only (setns).
 */
export function openTap(netns: string, name: string, vmId: string): number {
  addon ??= loadAddon<TapFdAddon>("tapfd", import.meta.url);
  try {
    return addon.openTap(`/run/netns/${netns}`, name);
  } catch (err) {
    throw new VmmError(`cannot open the VM's tap: ${(err as Error).message}`, vmId, {
      cause: err,
    });
  }
}
