// TCP_NODELAY on every relayed connection: the client's connection to the gateway, the
// gateway's TLS connection to a node's cluster port (Node's https.Agent leaves it off), the
// node's side of it, and the proxy's plain connection to a guest. Checked on real socket
// pairs made with Nagle's algorithm left on wherever Node lets a caller choose, so that the
// relay's own setNoDelay is what turns it off: removing it fails these tests.
import assert from "node:assert/strict";
import {
  Agent,
  createServer,
  type IncomingMessage,
  request,
  type Server,
  type ServerResponse,
} from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { after, describe, it } from "node:test";
import { forwardRequest, NodeAgents } from "../../../src/gateway/forward.js";
import { relayRequest } from "../../../src/relay/index.js";
import { listenCluster } from "../../../src/server/cluster-listener.js";
import { silentLogger } from "../../../src/shared/index.js";
import { startPki } from "../../helpers/gateway-cluster.js";

/**
 * Whether TCP_NODELAY is on for a socket, as Node last set it on the descriptor: its own
 * state, or for a TLS socket over an accepted one, the underlying socket's. Node keeps it
 * under a private symbol; one that is gone fails the test rather than pass it.
 */
function noDelayOf(socket: Socket): boolean {
  const state = (s: Socket): boolean | undefined => {
    const key = Object.getOwnPropertySymbols(s).find((k) => k.description === "kSetNoDelay");
    if (!key)
      throw new Error("Node keeps no kSetNoDelay on its sockets any more: update this test");
    return (s as unknown as Record<symbol, boolean | undefined>)[key];
  };
  const parent = (socket as Socket & { _parent?: Socket | null })._parent;
  return state(socket) === true || (parent ? state(parent) === true : false);
}

async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  after(() => {
    server.closeAllConnections();
    server.close();
  });
  return (server.address() as AddressInfo).port;
}

/** A GET to 127.0.0.1:port on a connection made with Nagle's algorithm on. */
async function get(port: number): Promise<string> {
  const agent = new Agent({ noDelay: false });
  after(() => agent.destroy());
  return new Promise((resolve, reject) => {
    request({ host: "127.0.0.1", port, path: "/", agent }, (res) => {
      let body = "";
      res.on("data", (chunk: Buffer) => {
        body += chunk.toString();
      });
      res.on("end", () => resolve(body));
    })
      .on("error", reject)
      .end();
  });
}

describe("TCP_NODELAY on relayed connections", () => {
  it("the gateway's client connection, its TLS connection to the node, and the node's side of it", async () => {
    const pki = await startPki();
    after(() => pki.remove());
    const seen: Record<string, boolean> = {};
    const node = await listenCluster({
      credentials: await pki.issue({ role: "node", name: "node0" }),
      host: "127.0.0.1",
      port: 0,
      onRequest: (req, res) => {
        seen.nodeSide = noDelayOf(req.socket);
        res.end("from the node");
      },
      onUpgrade: (_req, socket) => socket.destroy(),
      onInternal: (_req, res) => res.end(),
      logger: silentLogger,
    });
    after(() => node.close());
    const agents = new NodeAgents(await pki.issue({ role: "gateway", name: "gw" }), silentLogger);
    after(() => agents.close());
    const target = { nodeId: "node0", url: node.url };
    // The gateway's front, but with Nagle's algorithm left on by its server.
    const front = createServer({ noDelay: false }, (req: IncomingMessage, res: ServerResponse) => {
      void forwardRequest(req, res, target, { agents, idleTimeoutMs: 10_000 }).then(() => {
        seen.clientSide = noDelayOf(req.socket);
      });
    });
    assert.equal(await get(await listen(front)), "from the node");
    const pooled = Object.values(agents.for(target).freeSockets).flat();
    assert.equal(pooled.length, 1, "the node connection is kept for the next request");
    assert.deepEqual(
      { ...seen, gatewayToNode: pooled.every((socket) => socket && noDelayOf(socket)) },
      { clientSide: true, nodeSide: true, gatewayToNode: true },
    );
  });

  it("the proxy's connection to a sandbox and its client's, whatever their pools default to", async () => {
    let upstreamSide = false;
    const guest = createServer({ noDelay: false }, (req, res) => {
      upstreamSide = noDelayOf(req.socket);
      res.end("from the guest");
    });
    const guestPort = await listen(guest);
    const pool = new Agent({ keepAlive: true, noDelay: false });
    after(() => pool.destroy());
    let clientSide = false;
    const proxy = createServer({ noDelay: false }, (req, res) => {
      const upstream = { host: "127.0.0.1", port: guestPort, path: "/", headers: {}, agent: pool };
      void relayRequest(req, res, upstream, { idleTimeoutMs: 10_000 }).then(() => {
        clientSide = noDelayOf(req.socket);
      });
    });
    assert.equal(await get(await listen(proxy)), "from the guest");
    const pooled = Object.values(pool.freeSockets).flat();
    assert.equal(pooled.length, 1);
    assert.ok(
      pooled.every((socket) => socket && noDelayOf(socket)),
      "the connection to the guest",
    );
    assert.ok(clientSide, "the client's connection to the proxy");
    // The guest's own side is the guest's server's choice, not Warren's.
    assert.equal(typeof upstreamSide, "boolean");
  });
});
