import { closeSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { Handles } from "./handles.js";
import { Mount3Program, Nfs3Program } from "./nfs3.js";
import { serveRpc } from "./rpc.js";

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
}

export interface NfsServer {
  readonly port: number;
  close(): Promise<void>;
}

/** NFSv3 and MOUNT v3 for some volumes on one TCP port (nfs3.ts says what it serves). */
export async function startNfsServer(options: NfsServerOptions): Promise<NfsServer> {
  const { listen } = options;
  const volumes = await Promise.all(options.volumes.map((v) => Handles.open(v.root, v.key))).catch(
    (err: unknown) => {
      if ("fd" in listen) closeSync(listen.fd); // taken over: closed whatever happens
      throw err;
    },
  );
  const programs = [new Mount3Program(volumes), new Nfs3Program(volumes, options.admit)];
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    if (sockets.size >= (options.maxConnections ?? 16)) return void socket.destroy();
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    socket.setNoDelay(true);
    serveRpc(socket, programs);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    if ("fd" in listen) server.listen({ fd: listen.fd }, () => resolve());
    else server.listen(listen.port, listen.host, () => resolve());
  });
  const address = server.address();
  return {
    port: typeof address === "object" && address ? address.port : 0,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
