import { closeSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import type { DiskReserve } from "../disk-reserve.js";
import { Handles } from "./handles.js";
import { Mount3Program, Nfs3Program } from "./nfs3.js";
import { serveRpc } from "./rpc.js";
import { type NfsWork, newWork } from "./work.js";

export interface NfsServiceOptions {
  /**
   * The volumes served, each exported as `/<key>` (its id; also in its file handles, so a
   * handle of another volume is refused), from its directory (trusted: made by Warren).
   */
  readonly volumes: readonly { readonly key: string; readonly root: string }[];
  /** Connections at once; more are closed at once (a guest opening sockets in a loop). */
  readonly maxConnections?: number;
  /** Whether the volumes' team may add that many bytes now (its quota); default: always. */
  readonly admit?: (bytes: number) => boolean;
  /** The volumes' filesystem's free-space floor: writes below it get NOSPC. */
  readonly disk?: DiskReserve;
  /** How long a guest may leave its replies unread before its connection is dropped (30 s). */
  readonly stallMs?: number;
}

export interface NfsServerOptions extends NfsServiceOptions {
  /**
   * Where to listen: an address and port (0: any free port), or a listening socket made
   * elsewhere (a slot's namespace: network's listenInNamespace), taken over and closed with
   * the server.
   */
  readonly listen: { readonly host: string; readonly port: number } | { readonly fd: number };
}

/** NFS for some volumes, on connections accepted elsewhere (the guest services process). */
export interface NfsService {
  /** Serves a guest's connection until it closes. */
  accept(socket: Socket): void;
  /** Connections open now. */
  readonly connections: number;
  /** What the server did so far (directory reads, tree walks…), counted. */
  readonly work: Readonly<NfsWork>;
  /** Cuts every connection. */
  close(): void;
}

export interface NfsServer extends Omit<NfsService, "accept" | "close"> {
  readonly port: number;
  close(): Promise<void>;
}

const STALL_MS = 30_000;

/** NFSv3 and MOUNT v3 for some volumes (nfs3.ts says what it serves), on given connections. */
export async function createNfsService(options: NfsServiceOptions): Promise<NfsService> {
  const work = newWork();
  const volumes = await Promise.all(
    options.volumes.map((v) => Handles.open(v.root, v.key, { work })),
  );
  const programs = [
    new Mount3Program(volumes),
    new Nfs3Program(volumes, { admit: options.admit, disk: options.disk, work }),
  ];
  const limits = { stallMs: options.stallMs ?? STALL_MS };
  const sockets = new Set<Socket>();
  return {
    accept(socket) {
      // Half-open: a guest that sent its last calls and shut its side still gets the replies.
      socket.allowHalfOpen = true;
      socket.on("error", () => {});
      if (sockets.size >= (options.maxConnections ?? 16)) return void socket.destroy();
      sockets.add(socket);
      socket.once("close", () => sockets.delete(socket));
      socket.setNoDelay(true);
      serveRpc(socket, programs, limits);
    },
    get connections() {
      return sockets.size;
    },
    work,
    close() {
      for (const socket of sockets) socket.destroy();
    },
  };
}

/** An NfsService on a TCP listener of its own (tests; a development server). */
export async function startNfsServer(options: NfsServerOptions): Promise<NfsServer> {
  const { listen } = options;
  const service = await createNfsService(options).catch((err: unknown) => {
    if ("fd" in listen) closeSync(listen.fd); // taken over: closed whatever happens
    throw err;
  });
  const server: Server = createServer({ allowHalfOpen: true }, (socket) => service.accept(socket));
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
      return service.connections;
    },
    work: service.work,
    close: () =>
      new Promise<void>((resolve) => {
        service.close();
        server.close(() => resolve());
      }),
  };
}
