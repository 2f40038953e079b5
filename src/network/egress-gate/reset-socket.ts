import type { Socket } from "node:net";

/**
 * Cuts a connection: with a reset (RST) where one can be sent, else by closing it. Once
 * `end()` has run, libuv refuses the reset while its shutdown is queued (EINVAL) and Node 20
 * marks the handle closing all the same, so nothing ever closes it: its descriptor leaks and
 * the process spins at exit. A relayed side is ended by `pipe()` when the other ends.
 */
export function resetSocket(socket: Socket): void {
  if (socket.writableEnded) socket.destroy();
  else socket.resetAndDestroy();
}
