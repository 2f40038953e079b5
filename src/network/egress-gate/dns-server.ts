import type { Socket as UdpSocket } from "node:dgram";
import type { Socket } from "node:net";
import type { Logger } from "../../shared/index.js";
import { MAX_QUERY_BYTES } from "./dns-answers.js";

/** The answer to one query (undefined: none). May throw: the query is then dropped. */
export type AnswerDns = (query: Buffer) => Promise<Buffer | undefined>;

/** A TCP DNS client silent (sending nothing, reading nothing) this long is dropped. */
const STREAM_IDLE_MS = 10_000;
/** Unanswered query bytes held per TCP connection; past this it is read no further until answered. */
const MAX_PENDING_BYTES = 2 * (2 + MAX_QUERY_BYTES);

/**
 * DNS over UDP on `udp`: each datagram answered to where it came from. Every failure stays
 * here (the socket is the guest's to aim at): a query whose answer throws, a source the
 * kernel cannot answer (port 0, which guest root can send from), an answer ready once the
 * socket closed (a policy change closed the gate mid-lookup).
 */
export function serveDnsDatagrams(udp: UdpSocket, answer: AnswerDns, logger?: Logger): void {
  const ask = settled(answer);
  let open = true;
  udp.once("close", () => {
    open = false;
  });
  udp.on("message", (query, from) => {
    // Nothing can be sent to port 0: not worth a lookup.
    if (from.port === 0) return;
    ask(query).then(
      (reply) => {
        if (!reply || !open) return;
        try {
          udp.send(reply, from.port, from.address, (err) => {
            if (err) logger?.debug({ err }, "egress_gate.dns_send_failed");
          });
        } catch (err) {
          logger?.debug({ err }, "egress_gate.dns_send_failed");
        }
      },
      (err: unknown) => logger?.debug({ err }, "egress_gate.dns_query_failed"),
    );
  });
}

/**
 * DNS over TCP: two-byte length prefixes, answered one at a time, in order. A client that
 * does not read its answers is not read either (nothing piles up in memory), one that sends
 * a prefix past the bound or a query with no answer is cut, and one silent for
 * STREAM_IDLE_MS is dropped.
 */
export function serveDnsStream(socket: Socket, answer: AnswerDns, logger?: Logger): void {
  const ask = settled(answer);
  socket.on("error", () => {});
  socket.setTimeout(STREAM_IDLE_MS, () => socket.destroy());
  let pending = Buffer.alloc(0);
  let busy = false;

  /** The next whole query, or undefined (none yet; a bad prefix destroys the socket). */
  const take = (): Buffer | undefined => {
    if (pending.length < 2) return undefined;
    const length = pending.readUInt16BE(0);
    if (length === 0 || length > MAX_QUERY_BYTES) return void socket.destroy();
    if (pending.length < 2 + length) return undefined;
    const query = pending.subarray(2, 2 + length);
    pending = pending.subarray(2 + length);
    return query;
  };

  const pump = async (): Promise<void> => {
    if (busy) return;
    busy = true;
    try {
      for (let query = take(); query && !socket.destroyed; query = take()) {
        const reply = await ask(query).catch((err: unknown) => {
          logger?.debug({ err }, "egress_gate.dns_query_failed");
          return undefined;
        });
        if (!reply || socket.destroyed) return void socket.destroy();
        const prefix = Buffer.alloc(2);
        prefix.writeUInt16BE(reply.length);
        if (!socket.write(Buffer.concat([prefix, reply]))) await drained(socket);
      }
    } finally {
      busy = false;
    }
    if (!socket.destroyed && pending.length < MAX_PENDING_BYTES) socket.resume();
  };

  socket.on("data", (chunk: Buffer) => {
    pending = Buffer.concat([pending, chunk]);
    // Read no further until what is here has been answered.
    if (pending.length >= MAX_PENDING_BYTES) socket.pause();
    void pump();
  });
}

/** `answer`, throwing only by rejecting. */
function settled(answer: AnswerDns): AnswerDns {
  return async (query) => answer(query);
}

/** Resolves once `socket` can take more, or is gone. */
function drained(socket: Socket): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      socket.off("drain", done);
      socket.off("close", done);
      resolve();
    };
    socket.once("drain", done);
    socket.once("close", done);
  });
}
