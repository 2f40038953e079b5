import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import type { Socket } from "node:net";
import { after, before, test } from "node:test";
import type { FakeRouter } from "../../fakes/fake-router.js";
import {
  closeAll,
  closeServer,
  deferred,
  frontServer,
  listen,
  rawExchange,
  send,
  sendStreaming,
  upstream,
  within,
} from "./harness.js";

// onSandboxStopped: the proxy cuts a stopped sandbox's streams and drops its pool, so the
// next sandbox at the same address starts from fresh connections. Upstreams are real HTTP
// servers on 127.0.0.1 standing in for sandboxes; FakeRouter stands in for the orchestrator.

let proxyPort: number;
let router: FakeRouter;
let streamPort: number;
let upstreamRequestClosed = deferred();
let upstreamSocketClosed = deferred();

before(async () => {
  const app = await upstream((req, res) => {
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write("data: first\n\n");
    req.socket.on("close", () => upstreamRequestClosed.resolve());
  });
  app.server.on("upgrade", (_req, socket: Socket) => {
    socket.on("error", () => {});
    socket.on("close", () => upstreamSocketClosed.resolve());
    socket.write(
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x-raw\r\nConnection: Upgrade\r\n\r\n",
    );
    socket.on("data", (chunk: Buffer) => socket.write(chunk));
    socket.on("end", () => socket.end());
  });
  streamPort = app.port;
  ({ port: proxyPort, router } = await frontServer());
});
after(closeAll);

test("a stopped sandbox's open streaming response is cut, upstream too", {
  timeout: 10_000,
}, async () => {
  router.add("s1", { ports: { 3000: streamPort } });
  upstreamRequestClosed = deferred();
  const res = await sendStreaming(proxyPort, {
    path: "/events",
    headers: { host: "3000-s1.example.test" },
  });
  res.on("error", () => {});
  const [first] = (await once(res, "data")) as [Buffer];
  assert.equal(first.toString(), "data: first\n\n");
  const closed = new Promise((resolve) => res.once("close", resolve));
  router.stop("s1");
  assert.equal(await within(closed, 2_000), true, "client response cut");
  assert.equal(res.complete, false);
  assert.equal(await within(upstreamRequestClosed.promise, 2_000), true, "upstream request closed");
  // Gone for good: the router no longer knows it.
  const after = await send(proxyPort, { headers: { host: "3000-s1.example.test" } });
  assert.equal(after.status, 502);
});

test("a stopped sandbox's upgraded socket is closed, upstream too", {
  timeout: 10_000,
}, async () => {
  router.add("s2", { ports: { 3000: streamPort } });
  upstreamSocketClosed = deferred();
  const { socket, reader, head } = await rawExchange(
    proxyPort,
    "GET / HTTP/1.1\r\nHost: 3000-s2.example.test\r\nConnection: Upgrade\r\nUpgrade: x-raw\r\n\r\n",
  );
  assert.match(head, /^HTTP\/1\.1 101 /);
  socket.write("ping");
  assert.ok(await reader.until((b) => b.toString() === "ping"));
  router.stop("s2");
  assert.equal(await within(reader.closed, 2_000), true, "client socket closed");
  assert.equal(await within(upstreamSocketClosed.promise, 2_000), true, "upstream socket closed");
});

test("streams of other sandboxes are not cut", { timeout: 10_000 }, async () => {
  router.add("keep", { ports: { 3000: streamPort } });
  router.add("other", { ports: { 3000: streamPort } });
  const res = await sendStreaming(proxyPort, { headers: { host: "3000-keep.example.test" } });
  await once(res, "data");
  router.stop("other");
  const closed = new Promise((resolve) => res.once("close", resolve));
  assert.equal(await within(closed, 300), false, "stream of another sandbox still open");
  res.destroy();
});

/**
 * One listening port standing in for a sandbox address; each connection belongs to the
 * sandbox that had the address when it was opened (`generation`), as a guest's TCP
 * connections belong to that guest. Connections stay open (keep-alive), so a pool that
 * survived the stop would send the next sandbox's requests to the old one.
 */
async function addressServer(): Promise<{
  server: Server;
  port: number;
  connections: Set<Socket>;
  setGeneration(name: string): void;
}> {
  let generation = "first";
  const owner = new WeakMap<Socket, string>();
  const connections = new Set<Socket>();
  const { server, port } = await upstream((req, res) => {
    res.end(owner.get(req.socket));
  });
  server.keepAliveTimeout = 60_000;
  server.on("connection", (socket: Socket) => {
    owner.set(socket, generation);
    connections.add(socket);
    socket.on("close", () => connections.delete(socket));
  });
  return {
    server,
    port,
    connections,
    setGeneration(name) {
      generation = name;
    },
  };
}

test("after a stop, the next sandbox at the same address gets fresh connections", {
  timeout: 10_000,
}, async () => {
  const address = await addressServer();
  router.add("r1", { ports: { 3000: address.port } });
  const host = "3000-r1.example.test";
  assert.equal((await send(proxyPort, { headers: { host } })).body, "first");
  assert.equal((await send(proxyPort, { headers: { host } })).body, "first");
  assert.equal(address.connections.size, 1, "the sandbox's pool keeps its connection alive");

  router.stop("r1");
  address.setGeneration("second");
  // The same sandbox resumed at the same address, and a new one that got the address.
  router.add("r1", { ports: { 3000: address.port } });
  router.add("r2", { ports: { 3000: address.port } });
  assert.equal((await send(proxyPort, { headers: { host } })).body, "second");
  assert.equal(
    (await send(proxyPort, { headers: { host: "3000-r2.example.test" } })).body,
    "second",
  );
});

test("sandboxes never share pooled connections", { timeout: 10_000 }, async () => {
  const address = await addressServer();
  router.add("p1", { ports: { 3000: address.port } });
  router.add("p2", { ports: { 3000: address.port } });
  assert.equal(
    (await send(proxyPort, { headers: { host: "3000-p1.example.test" } })).body,
    "first",
  );
  address.setGeneration("second");
  // p1's idle connection is in p1's pool only.
  assert.equal(
    (await send(proxyPort, { headers: { host: "3000-p2.example.test" } })).body,
    "second",
  );
  assert.equal(
    (await send(proxyPort, { headers: { host: "3000-p1.example.test" } })).body,
    "first",
  );
});

test("after a stop, a new upstream listening on the same address answers", {
  timeout: 10_000,
}, async () => {
  const oldServer = createServer((_req, res) => res.end("old"));
  oldServer.keepAliveTimeout = 60_000;
  const port = await listen(oldServer);
  router.add("q1", { ports: { 3000: port } });
  assert.equal((await send(proxyPort, { headers: { host: "3000-q1.example.test" } })).body, "old");
  router.stop("q1");
  await closeServer(oldServer);

  const { server: newServer } = await upstream((_req, res) => res.end("new"), port);
  assert.equal(newServer.listening, true);
  router.add("q2", { ports: { 3000: port } });
  router.add("q1", { ports: { 3000: port } });
  const q2 = await send(proxyPort, { headers: { host: "3000-q2.example.test" } });
  assert.deepEqual([q2.status, q2.body], [200, "new"]);
  const q1 = await send(proxyPort, { headers: { host: "3000-q1.example.test" } });
  assert.deepEqual([q1.status, q1.body], [200, "new"]);
});
