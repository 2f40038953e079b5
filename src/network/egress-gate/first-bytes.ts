import type { Socket } from "node:net";
import { MAX_SNIFF_BYTES, sniffName } from "./sniff.js";

/** A client that names no host within this long is judged by its address alone. */
const SNIFF_TIMEOUT_MS = 3_000;

/**
 * What the guest sends first, until it names a host, shows it never will, sends 16 KiB or
 * waits too long; the socket is left paused (its bytes go on to whatever serves it next).
 */
export function firstBytes(guest: Socket): Promise<Buffer> {
  return new Promise((resolve) => {
    let head = Buffer.alloc(0);
    const done = () => {
      clearTimeout(timer);
      guest.off("data", onData);
      guest.off("close", done);
      guest.pause();
      resolve(head);
    };
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      if (head.length >= MAX_SNIFF_BYTES || sniffName(head).kind !== "more") done();
    };
    const timer = setTimeout(done, SNIFF_TIMEOUT_MS);
    guest.on("data", onData);
    guest.once("close", done);
    guest.resume();
  });
}
