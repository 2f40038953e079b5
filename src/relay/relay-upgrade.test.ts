import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import { type AddressInfo, connect, type Socket } from "node:net";
import { after, describe, it } from "node:test";
import { forwardingOf, relayRequestHeaders } from "./headers.js";
import type { RelayOptions, RelayOutcome } from "./relay-options.js";
import { relayUpgrade } from "./relay-upgrade.js";

// relayUpgrade between a raw client socket, a real front server and a real upstream.

const servers: Server[] = [];
const sockets: Socket[] = [];
after(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

async function listen(server: Server): Promise<number> {
  servers.push(server);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return (server.address() as AddressInfo).port;
}

/** An upstream that echoes after a 101 on `/ws`, and declines anything else with 403. */
async function echoUpstream(): Promise<number> {
  const server = createServer((_req, res) => res.writeHead(403).end("no way"));
  server.on("upgrade", (req, socket: Socket, head: Buffer) => {
    if (req.url !== "/ws") {
      socket.end(
        "HTTP/1.1 403 Forbidden\r\ncontent-length: 6\r\nx-hop: 1\r\nconnection: x-hop\r\n\r\nno way",
      );
      return;
    }
    socket.write(
      "HTTP/1.1 101 Switching Protocols\r\nupgrade: echo\r\nconnection: upgrade\r\n\r\n",
    );
    if (head.length > 0) socket.write(head);
    socket.pipe(socket);
  });
  return listen(server);
}

async function front(
  port: number,
  options: Partial<RelayOptions> = {},
): Promise<{ port: number; outcomes: RelayOutcome[] }> {
  const outcomes: RelayOutcome[] = [];
  const server = createServer();
  server.on("upgrade", (req, socket: Socket, head: Buffer) => {
    const headers = relayRequestHeaders(req.rawHeaders, { ...forwardingOf(req), upgrade: true });
    const upstream = { host: "127.0.0.1", port, path: req.url ?? "/", headers };
    void relayUpgrade(req, socket, head, upstream, { idleTimeoutMs: 5_000, ...options }).then(
      (outcome) => {
        outcomes.push(outcome);
        if (outcome.kind === "unreachable") socket.end("HTTP/1.1 599 Caller\r\n\r\n");
      },
    );
  });
  return { port: await listen(server), outcomes };
}

/** Sends an upgrade request (and `extra` bytes after it); returns all the socket received. */
async function exchange(port: number, path: string, extra = ""): Promise<string> {
  const socket = connect(port, "127.0.0.1");
  sockets.push(socket);
  socket.write(
    `GET ${path} HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n${extra}`,
  );
  let received = "";
  for await (const chunk of socket) {
    received += String(chunk);
    if (extra !== "" && received.endsWith(extra)) break;
  }
  socket.destroy();
  return received;
}

describe("relayUpgrade", () => {
  it("pipes both sockets once the upstream switched", async () => {
    const { port, outcomes } = await front(await echoUpstream());
    const received = await exchange(port, "/ws", "ping");
    assert.match(received, /^HTTP\/1\.1 101 Switching Protocols\r\n/);
    assert.match(received, /ping$/);
    assert.deepEqual(outcomes, [{ kind: "relayed", status: 101 }]);
  });

  it("relays a declined upgrade's answer, hop-by-hop headers dropped, then closes", async () => {
    const { port, outcomes } = await front(await echoUpstream());
    const received = await exchange(port, "/other");
    assert.match(received, /^HTTP\/1\.1 403 Forbidden\r\n/);
    assert.doesNotMatch(received, /x-hop/i);
    assert.match(received, /\r\nconnection: close\r\n/);
    assert.match(received, /no way$/);
    assert.deepEqual(outcomes, [{ kind: "relayed", status: 403 }]);
  });

  it("leaves an unreachable upstream to the caller, or refuses on the socket", async () => {
    const closed = await echoUpstream().then(async (port) => {
      const server = servers.pop();
      server?.closeAllConnections();
      await new Promise((resolve) => server?.close(resolve));
      return port;
    });
    const unanswered = await front(closed);
    assert.match(await exchange(unanswered.port, "/ws"), /^HTTP\/1\.1 599 Caller/);
    assert.equal(unanswered.outcomes[0]?.kind, "unreachable");

    const refusing = await front(closed, { refuse: () => ({ message: "not open", code: 502 }) });
    const received = await exchange(refusing.port, "/ws");
    const [head = "", body = ""] = received.split("\r\n\r\n");
    assert.match(head, /^HTTP\/1\.1 502 Bad Gateway\r\n/);
    assert.match(head, /\r\naccess-control-allow-origin: \*/);
    assert.match(head, /\r\nconnection: close/);
    assert.deepEqual(JSON.parse(body), { message: "not open", code: 502 });
    assert.deepEqual(refusing.outcomes, [{ kind: "ended", status: 502 }]);
  });
});
