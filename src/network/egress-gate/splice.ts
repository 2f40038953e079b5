import { connect, type Socket } from "node:net";
import { resetSocket } from "./reset-socket.js";

/** An upstream that does not accept within this long fails the guest's connection. */
const CONNECT_TIMEOUT_MS = 10_000;

/**
 * Bytes both ways between the guest and the upstream it may reach, `head` (what the gate
 * read to decide) first. An end is relayed (the pipes half-close); an upstream failure calls
 * `failed` (the gate then cuts: both sides reset). Returns what cuts it.
 */
export function splice(
  guest: Socket,
  head: Buffer,
  to: { address: string; port: number },
  failed: () => void,
): { cut(): void } {
  const upstream = connect({ host: to.address, port: to.port });
  upstream.setTimeout(CONNECT_TIMEOUT_MS, failed);
  upstream.once("connect", () => {
    upstream.setTimeout(0);
    upstream.write(head);
    guest.pipe(upstream);
    upstream.pipe(guest);
    guest.resume();
  });
  upstream.on("error", failed);
  upstream.once("close", (hadError) => {
    if (hadError) failed();
  });
  guest.once("close", () => upstream.destroy());
  return {
    cut: () => {
      upstream.destroy();
      if (!guest.destroyed) resetSocket(guest);
    },
  };
}
