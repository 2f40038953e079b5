import assert from "node:assert/strict";
import type { IncomingHttpHeaders } from "node:http";
import type { Socket } from "node:net";
import { after, before, test } from "node:test";
import { ENVD_PORT } from "../../../src/protocol/index.js";
import { closeAll, deferred, frontServer, rawExchange, upstream, within } from "./harness.js";

// Upgrade requests (WebSocket or any other protocol) through a real front server. The
// upstream, standing in for an app port in the sandbox, answers 101 on its `upgrade` event
// and echoes bytes; FakeRouter stands in for the orchestrator.

let proxyPort: number;
let upgradeHeaders: IncomingHttpHeaders | undefined;
let upstreamSocketClosed = deferred();

function upgradeRequest(host: string, path = "/ws", extra = ""): string {
  return (
    `GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n" +
    extra
  );
}

before(async () => {
  const app = await upstream((_req, res) => {
    res.writeHead(426);
    res.end();
  });
  app.server.on("upgrade", (req, socket: Socket, head: Buffer) => {
    upgradeHeaders = req.headers;
    socket.on("error", () => {});
    socket.on("close", () => upstreamSocketClosed.resolve());
    if (req.url === "/refuse") {
      socket.end(
        "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n\r\nno way",
      );
      return;
    }
    // The greeting goes out with the 101, so the proxy must relay the upstream's head bytes.
    socket.write(
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
        "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\nhello;",
    );
    if (head.length > 0) socket.write(head);
    socket.on("data", (chunk: Buffer) => socket.write(chunk));
    socket.on("end", () => socket.end());
  });
  const front = await frontServer();
  proxyPort = front.port;
  front.router.add("ws", { ports: { [ENVD_PORT]: app.port, 8000: app.port } });
  front.router.add("private", {
    ports: { 8000: app.port },
    allowPublicTraffic: false,
    trafficAccessToken: "tok",
  });
});
after(closeAll);

test("an upgrade is forwarded, answered 101, and bytes flow both ways", {
  timeout: 10_000,
}, async () => {
  upstreamSocketClosed = deferred();
  const { socket, reader, head } = await rawExchange(
    proxyPort,
    upgradeRequest("8000-ws.example.test", "/ws", "early;"),
  );
  assert.match(head, /^HTTP\/1\.1 101 Switching Protocols\r\n/);
  assert.match(head, /\r\nUpgrade: websocket\r\n/i);
  assert.match(head, /\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK\+xOo=\r\n/);
  assert.equal(upgradeHeaders?.upgrade, "websocket");
  assert.equal(upgradeHeaders?.connection, "upgrade");
  assert.equal(upgradeHeaders?.["sec-websocket-key"], "dGhlIHNhbXBsZSBub25jZQ==");
  assert.equal(upgradeHeaders?.host, "8000-ws.example.test");
  // The upstream's greeting, then the bytes the client sent right after its request.
  assert.ok(await reader.until((b) => b.toString() === "hello;early;"), reader.buffered.toString());
  reader.take();
  socket.write("ping");
  assert.ok(await reader.until((b) => b.toString() === "ping"));
  reader.take();
  const big = Buffer.alloc(256 * 1024, "x");
  socket.write(big);
  assert.ok(await reader.until((b) => b.length >= big.length));
  assert.ok(reader.take().equals(big));

  socket.end();
  assert.equal(await within(upstreamSocketClosed.promise, 3_000), true, "upstream socket closed");
  assert.equal(await within(reader.closed, 3_000), true, "client socket closed");
});

test("an upstream that declines the upgrade is relayed, then the socket closes", {
  timeout: 10_000,
}, async () => {
  const { reader, head } = await rawExchange(
    proxyPort,
    upgradeRequest("8000-ws.example.test", "/refuse"),
  );
  assert.match(head, /^HTTP\/1\.1 403 Forbidden\r\n/);
  assert.match(head, /\r\nconnection: close\r\n/i);
  assert.equal(await within(reader.closed, 3_000), true);
  assert.equal(reader.buffered.toString(), "no way");
});

test("upgrade refusals are HTTP responses with the JSON body", { timeout: 10_000 }, async () => {
  const cases: Array<[string, number, string]> = [
    ["8000-nope.example.test", 502, "The sandbox was not found"],
    ["9999-ws.example.test", 502, "The sandbox is running but port 9999 is not open"],
    ["8000-private.example.test", 403, "Missing e2b-traffic-access-token header"],
    ["49983-ws.example.test", 404, ""],
    ["99999-ws.example.test", 400, ""],
  ];
  for (const [host, status, message] of cases) {
    const path = host.startsWith("49983-") ? "/upgrade" : "/ws";
    const { reader, head } = await rawExchange(proxyPort, upgradeRequest(host, path));
    assert.match(head, new RegExp(`^HTTP/1\\.1 ${status} `), host);
    assert.match(head, /\r\ncontent-type: application\/json\r\n/i);
    assert.equal(await within(reader.closed, 3_000), true, `${host}: socket closed`);
    const body = JSON.parse(reader.buffered.toString()) as { code: number; message: string };
    assert.equal(body.code, status);
    if (message) assert.equal(body.message, message);
  }
});
