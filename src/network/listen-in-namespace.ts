import { WarrenError } from "../shared/index.js";
import { loadAddon } from "../shared/load-addon.js";

interface NsListenAddon {
  listenTcp(netnsPath: string, address: string, port: number): number;
}

let addon: NsListenAddon | undefined;

/**
 * A listening TCP socket on `address:port` inside the network namespace `netns` (`ip
 * netns`'s name), for `net.Server.listen({ fd })`: what the server serves a slot's guest on
 * its gateway address lives there, reachable from the guest's tap alone (see
 * native/nslisten/nslisten.c). Root only (setns).
 */
export function listenInNamespace(netns: string, address: string, port: number): number {
  addon ??= loadAddon<NsListenAddon>("nslisten", import.meta.url);
  try {
    return addon.listenTcp(`/run/netns/${netns}`, address, port);
  } catch (err) {
    throw new WarrenError(
      "network_failed",
      `cannot listen on ${address}:${port} in ${netns}: ${(err as Error).message}`,
      { cause: err },
    );
  }
}
