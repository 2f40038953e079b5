import { closeSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import type { DiskReserve } from "../disk-reserve.js";
import { Handles } from "./handles.js";
import { Mount3Program, Nfs3Program } from "./nfs3.js";
import { serveRpc } from "./rpc.js";
import { type NfsWork, newWork } from "./work.js";

export interface NfsServerOptions {
  /**
   * The volumes served, each exported as `/<key>` (its id; also in its file handles, so a
   * handle of another volume is refused), from its directory (trusted: made by Warren).
   */
  readonly volumes: readonly { readonly key: string; readonly root: string }[];
  /**
   * Where to listen: an address and port (0: any free port), or a listening socket made
   * elsewhere (a slot's namespace: network's listenInNamespace), taken over and closed with
   * the server.
   */
  readonly listen: { readonly host: string; readonly port: number } | { readonly fd: number };
  /** Connections at once; more are closed at once (a guest opening sockets in a loop). */
  readonly maxConnections?: number;
  /** Whether the volumes' team may add that many bytes now (its quota); default: always. */
  readonly admit?: (bytes: number) => boolean;
  /** The volumes' filesystem's free-space floor: writes below it get NOSPC. */
  readonly disk?: DiskReserve;
  /** How long a guest may leave its replies unread before its connection is dropped (30 s). */
  readonly stallMs?: number;
}

export interface NfsServer {
  readonly port: number;
  /** Connections open now. */
  readonly connections: number;
  /** What the server did so far (directory reads, tree walks…), counted. */
  readonly work: Readonly<NfsWork>;
  close(): Promise<void>;
}

const STALL_MS = 30_000;

/** NFSv3 and MOUNT v3 for some volumes on one TCP port (nfs3.ts says what it serves). */
export async function startNfsServer(options: NfsServerOptions): Promise<NfsServer> {
  const { listen } = options;
  const work = newWork();
  const volumes = await Promise.all(
    options.volumes.map((v) => Handles.open(v.root, v.key, { work })),
  ).catch((err: unknown) => {
    if ("fd" in listen) closeSync(listen.fd); // taken over: closed whatever happens
    throw err;
  });
  const programs = [
    new Mount3Program(volumes),
    new Nfs3Program(volumes, { admit: options.admit, disk: options.disk, work }),
  ];
  const limits = { stallMs: options.stallMs ?? STALL_MS };
  const sockets = new Set<Socket>();
  // Half-open: a guest that sent its last calls and shut its side down still gets the replies.
  const server: Server = createServer({ allowHalfOpen: true }, (socket) => {
    socket.on("error", () => {});
    if (sockets.size >= (options.maxConnections ?? 16)) return void socket.destroy();
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    socket.setNoDelay(true);
    serveRpc(socket, programs, limits);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    if ("fd" in listen) server.listen({ fd: listen.fd }, () => resolve());
    else server.listen(listen.port, listen.host, () => resolve());
  });
  // After listening, an error (EMFILE on accept) costs that connection, never the process.
  server.on("error", () => {});
  const address = server.address();
  return {
    port: typeof address === "object" && address ? address.port : 0,
    get connections() {
      return sockets.size;
    },
    work,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
