import type { Socket } from "node:net";
import { WarrenError } from "../shared/index.js";
import { loadAddon } from "../shared/load-addon.js";

interface NsListenAddon {
  listenTcp(netnsPath: string, address: string, port: number): number;
  bindUdp(netnsPath: string, address: string, port: number): number;
  originalDestination(fd: number): string;
}

let addon: NsListenAddon | undefined;

function nslisten(): NsListenAddon {
  addon ??= loadAddon<NsListenAddon>("nslisten", import.meta.url);
  return addon;
}

/**
 * A listening TCP socket on `address:port` inside the network namespace `netns` (`ip
 * netns`'s name), for `net.Server.listen({ fd })`: what the server serves a slot's guest on
 * its gateway address lives there, reachable from the guest's tap alone (see
 * native/nslisten/nslisten.c). Root only (setns).
 */
export function listenInNamespace(netns: string, address: string, port: number): number {
  return inNamespace(netns, address, port, "listen", (path) =>
    nslisten().listenTcp(path, address, port),
  );
}

/** A UDP socket bound to `address:port` inside `netns`, for `dgram`'s `bind({ fd })`. */
export function bindUdpInNamespace(netns: string, address: string, port: number): number {
  return inNamespace(netns, address, port, "bind UDP", (path) =>
    nslisten().bindUdp(path, address, port),
  );
}

/**
 * Where a connection accepted on such a listener was sent before the namespace's nat
 * REDIRECT brought it there (SO_ORIGINAL_DST).
 */
export function originalDestination(socket: Socket): { address: string; port: number } {
  // Node has no API for it; the handle's descriptor is stable while the socket is open.
  const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
  if (fd === undefined || fd < 0)
    throw new WarrenError("network_failed", "the connection has no descriptor");
  const text = nslisten().originalDestination(fd);
  const colon = text.lastIndexOf(":");
  return { address: text.slice(0, colon), port: Number(text.slice(colon + 1)) };
}

function inNamespace(
  netns: string,
  address: string,
  port: number,
  what: string,
  call: (path: string) => number,
): number {
  try {
    return call(`/run/netns/${netns}`);
  } catch (err) {
    throw new WarrenError(
      "network_failed",
      `cannot ${what} on ${address}:${port} in ${netns}: ${(err as Error).message}`,
      { cause: err },
    );
  }
}
