import { chmod, link, lstat, stat, unlink } from "node:fs/promises";
import { connect, createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { KEEPER_SOCKET_NAME } from "../protocol/keeper.js";
import { ensurePrivateDir } from "../shared/private-dir.js";

/**
 * The keeper's listening socket, `<dir>/keeper.sock`: the directory root's (this process's
 * uid), 0700, the socket 0600, so that only root reaches it. One keeper per directory: the
 * socket is bound under a name of this process's own and then hard-linked to its final name,
 * which fails while another keeper's is there (a keeper still answering is left alone; a
 * dead one's socket, refusing connections, is replaced).
 */
export interface KeeperSocket {
  readonly path: string;
  readonly server: Server;
  /** Stops listening and removes the socket's name, if it is still this keeper's. */
  close(): Promise<void>;
}

export class KeeperRunningError extends Error {}

export async function listenKeeperSocket(
  dir: string,
  onConnection: (socket: Socket) => void,
): Promise<KeeperSocket> {
  await ensureKeeperDir(dir);
  const path = join(dir, KEEPER_SOCKET_NAME);
  const own = join(dir, `.keeper-${process.pid}.sock`);
  await unlink(own).catch(() => {});
  const server = createServer(onConnection);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(own, () => {
      server.off("error", reject);
      resolve();
    });
  });
  try {
    await chmod(own, 0o600);
    await claimName(own, path);
  } catch (err) {
    await new Promise((resolve) => server.close(resolve));
    await unlink(own).catch(() => {});
    throw err;
  }
  await unlink(own).catch(() => {});
  const inode = await stat(path);
  return {
    path,
    server,
    close: async () => {
      await new Promise((resolve) => server.close(resolve));
      const now = await stat(path).catch(() => undefined);
      if (now && now.ino === inode.ino && now.dev === inode.dev) await unlink(path).catch(() => {});
    },
  };
}

/** Links `own` to `path`, replacing a socket there only once nothing answers on it. */
async function claimName(own: string, path: string): Promise<void> {
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      await link(own, path);
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    if (await answers(path)) throw new KeeperRunningError(`a keeper already listens at ${path}`);
    const info = await lstat(path).catch(() => undefined);
    if (info && !info.isSocket()) throw new Error(`${path} is not a socket`);
    await unlink(path).catch(() => {});
  }
  throw new Error(`cannot take ${path}: another keeper is starting`);
}

/** Whether something accepts connections on the socket at `path`. */
function answers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(path);
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/** Makes `dir` (0700) or checks it: a directory, not a link, of this process's uid. */
export function ensureKeeperDir(dir: string): Promise<void> {
  return ensurePrivateDir(dir, (message) => new Error(message), "keeper directory");
}
