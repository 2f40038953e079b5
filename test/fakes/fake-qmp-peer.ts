/**
 * A fake QMP peer on a unix socket: stands in for QEMU (which the VM tests drive for real),
 * greets (unless told not to), then hands each command it reads to `reply`, which answers
 * as QEMU would, or as an escaped QEMU might: never, or with a line that does not end.
 */
import { createServer, type Server, type Socket } from "node:net";

export interface QmpCommand {
  readonly execute: string;
  readonly id: number;
  readonly arguments?: Record<string, unknown>;
}

export interface FakeQmpPeer {
  readonly path: string;
  readonly server: Server;
  close(): void;
}

export function sendQmp(socket: Socket, message: unknown): void {
  socket.write(`${JSON.stringify(message)}\r\n`);
}

/** Starts the fake at `path`; `greet: false` accepts and then says nothing. */
export function fakeQmpPeer(
  path: string,
  reply: (cmd: QmpCommand, socket: Socket) => void,
  greet = true,
): Promise<FakeQmpPeer> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => {});
    if (greet) sendQmp(socket, { QMP: { version: {}, capabilities: [] } });
    let buffer = "";
    socket.on("data", (chunk) => {
      buffer += chunk.toString();
      let i = buffer.indexOf("\n");
      while (i >= 0) {
        const line = buffer.slice(0, i);
        buffer = buffer.slice(i + 1);
        if (line.trim()) reply(JSON.parse(line) as QmpCommand, socket);
        i = buffer.indexOf("\n");
      }
    });
  });
  const close = () => {
    for (const socket of sockets) socket.destroy();
    server.close();
  };
  return new Promise((resolve) => server.listen(path, () => resolve({ path, server, close })));
}

/**
 * Writes one line that never ends (`{"return": "xxxx…`) until the peer hangs up or `limit`
 * bytes are out; resolves with how many bytes the socket accepted.
 */
export function sendEndlessLine(socket: Socket, limit: number): Promise<number> {
  const chunk = Buffer.alloc(1 << 20, "x".charCodeAt(0));
  let sent = 0;
  return new Promise((resolve) => {
    const done = () => resolve(sent);
    socket.once("close", done);
    const pump = () => {
      while (sent < limit && !socket.destroyed) {
        const head = sent === 0 ? Buffer.from('{"return": "') : undefined;
        sent += chunk.length;
        if (!socket.write(head ? Buffer.concat([head, chunk]) : chunk)) {
          socket.once("drain", pump);
          return;
        }
      }
      if (sent >= limit) done();
    };
    pump();
  });
}
