import { once } from "node:events";
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type RequestListener,
  request,
  type Server,
} from "node:http";
import { connect, type Socket } from "node:net";
import { SandboxProxy, type SandboxProxyOptions } from "../../../src/proxy/index.js";
import { FakeRouter } from "../../fakes/fake-router.js";

/** Servers and sockets the tests opened; `closeAll()` (each file's `after`) ends them. */
const open: Array<() => Promise<void> | void> = [];

export async function closeAll(): Promise<void> {
  for (const close of open.splice(0).reverse()) await close();
}

/** Listens on 127.0.0.1 (port 0: any free port) and returns the port. */
export async function listen(server: Server, port = 0): Promise<number> {
  server.listen(port, "127.0.0.1");
  await once(server, "listening");
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no TCP address");
  return address.port;
}

export async function closeServer(server: Server): Promise<void> {
  if (!server.listening) return;
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

/** An upstream server standing in for a sandbox port; closed by `closeAll()`. */
export async function upstream(
  handler: RequestListener,
  port = 0,
): Promise<{ server: Server; port: number }> {
  const server = createServer(handler);
  open.push(() => closeServer(server));
  return { server, port: await listen(server, port) };
}

/** A port nothing listens on (bound once, then released). */
export async function closedPort(): Promise<number> {
  const server = createServer();
  const port = await listen(server);
  await closeServer(server);
  return port;
}

/**
 * The node server as Warren wires it: one port, the proxy takes what `matches()` accepts
 * (requests and upgrades), anything else gets the "API" (here a plain 404 `api`).
 */
export async function frontServer(
  options: Partial<SandboxProxyOptions> = {},
): Promise<{ port: number; proxy: SandboxProxy; router: FakeRouter }> {
  const router = new FakeRouter(await closedPort());
  const proxy = new SandboxProxy({ router: () => router, ...options });
  router.onSandboxStopped((id) => proxy.sandboxStopped(id));
  const server = createServer((req, res) => {
    if (proxy.matches(req)) return proxy.handleRequest(req, res);
    res.writeHead(404, { "content-type": "text/plain" });
    res.end("api");
  });
  server.on("upgrade", (req, socket, head) => {
    if (proxy.matches(req)) return proxy.handleUpgrade(req, socket, head);
    socket.destroy();
  });
  open.push(async () => {
    proxy.close();
    await closeServer(server);
  });
  return { port: await listen(server), proxy, router };
}

export interface Sent {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

export interface SendOptions {
  method?: string;
  path?: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
}

/** One request on a fresh connection (no pooling on the client side). */
export async function send(port: number, options: SendOptions = {}): Promise<Sent> {
  const res = await sendStreaming(port, options);
  const chunks: Buffer[] = [];
  for await (const chunk of res) chunks.push(chunk as Buffer);
  return {
    status: res.statusCode ?? 0,
    headers: res.headers,
    body: Buffer.concat(chunks).toString(),
  };
}

/** Like `send`, but hands back the response as soon as its head arrives. */
export function sendStreaming(port: number, options: SendOptions = {}): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = request({
      host: "127.0.0.1",
      port,
      method: options.method ?? "GET",
      path: options.path ?? "/",
      headers: options.headers,
      agent: false,
    });
    req.on("response", resolve);
    req.on("error", reject);
    req.end(options.body);
  });
}

/** Collects everything a socket receives, so tests can wait for what they expect. */
export class SocketReader {
  buffered = Buffer.alloc(0);
  readonly closed: Promise<void>;
  #wake: () => void = () => {};

  constructor(readonly socket: Socket) {
    socket.on("data", (chunk: Buffer) => {
      this.buffered = Buffer.concat([this.buffered, chunk]);
      this.#wake();
    });
    socket.on("error", () => {});
    this.closed = once(socket, "close").then(() => this.#wake());
  }

  /** Waits until the bytes received satisfy `done`; false when the socket closed first. */
  async until(done: (received: Buffer) => boolean): Promise<boolean> {
    while (!done(this.buffered)) {
      if (this.socket.destroyed) return false;
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
    }
    return true;
  }

  /** Removes and returns what was received so far. */
  take(count = this.buffered.length): Buffer {
    const taken = this.buffered.subarray(0, count);
    this.buffered = this.buffered.subarray(count);
    return taken;
  }
}

/** Sends raw bytes on a new connection and reads a response head. */
export async function rawExchange(
  port: number,
  text: string,
): Promise<{ socket: Socket; reader: SocketReader; head: string }> {
  const socket = connect(port, "127.0.0.1");
  open.push(() => {
    socket.destroy();
  });
  const reader = new SocketReader(socket);
  await once(socket, "connect");
  socket.write(text);
  await reader.until((received) => received.includes("\r\n\r\n"));
  const end = reader.buffered.indexOf("\r\n\r\n");
  const head = end < 0 ? reader.take().toString() : reader.take(end + 4).toString();
  return { socket, reader, head };
}

/** A promise with its resolver, for steps the test and an upstream wait on. */
export function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** Resolves `true` when `promise` settles within `ms`, else `false`. */
export async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([promise.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
