import assert from "node:assert/strict";
import { once } from "node:events";
import {
  Agent,
  createServer,
  type IncomingMessage,
  type RequestListener,
  request,
  type Server,
} from "node:http";
import {
  type AddressInfo,
  connect,
  createServer as createNetServer,
  type Server as NetServer,
  type Socket,
} from "node:net";
import { after, describe, it } from "node:test";
import { forwardingOf, relayRequestHeaders } from "./headers.js";
import type { Cut, RelayOutcome } from "./relay-options.js";
import { type RequestRelayOptions, relayRequest } from "./relay-request.js";
import { HEAD_TIMEOUT, type Upstream } from "./upstream.js";

// relayRequest between a real client, a real front server and a real upstream on loopback:
// what the proxy and the gateway both rely on.

const servers: Server[] = [];
const netServers: NetServer[] = [];
const rawSockets: Socket[] = [];
after(async () => {
  for (const socket of rawSockets.splice(0)) socket.destroy();
  for (const server of netServers.splice(0)) server.close();
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

async function listen(handler: RequestListener): Promise<number> {
  const server = createServer(handler);
  servers.push(server);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return (server.address() as AddressInfo).port;
}

async function closedPort(): Promise<number> {
  const server = createServer().listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** A front server relaying everything to `port`; `outcomes` gets each relay's outcome. */
async function front(
  port: number,
  options: Partial<RequestRelayOptions> & { agent?: Agent } = {},
): Promise<{ port: number; outcomes: RelayOutcome[] }> {
  const outcomes: RelayOutcome[] = [];
  const { agent, ...relayOptions } = options;
  const frontPort = await listen((req, res) => {
    const upstream: Upstream = {
      host: "127.0.0.1",
      port,
      path: req.url ?? "/",
      headers: relayRequestHeaders(req.rawHeaders, { ...forwardingOf(req), upgrade: false }),
      ...(agent && { agent }),
    };
    void relayRequest(req, res, upstream, { idleTimeoutMs: 5_000, ...relayOptions }).then(
      (outcome) => {
        outcomes.push(outcome);
        // The caller answers what the relay left to it.
        if (!res.headersSent && outcome.kind !== "ended") res.writeHead(599).end("caller");
      },
    );
  });
  return { port: frontPort, outcomes };
}

function send(
  port: number,
  options: { method?: string; path?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<{ status: number; headers: IncomingMessage["headers"]; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: "127.0.0.1", port, agent: false, method: options.method ?? "GET", ...options },
      (res) => {
        let body = "";
        res.on("data", (chunk) => {
          body += chunk;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      },
    );
    req.on("error", reject);
    req.end(options.body);
  });
}

describe("relayRequest", () => {
  it("streams the request body as sent and the answer as it comes", async () => {
    const upstream = await listen((req, res) => {
      let bytes = 0;
      req.on("data", (chunk: Buffer) => {
        bytes += chunk.length;
      });
      req.on("end", () => {
        res.writeHead(200, { "x-te": req.headers["transfer-encoding"] ?? "none" });
        res.write(`got ${bytes}`);
        setTimeout(() => res.end(" done"), 200);
      });
    });
    const { port, outcomes } = await front(upstream);
    const answer = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = request({ host: "127.0.0.1", port, method: "POST", agent: false }, resolve);
      req.on("error", reject);
      req.write("a".repeat(1000));
      req.end("b".repeat(500));
    });
    assert.equal(answer.headers["x-te"], "chunked", "a chunked upload stays chunked");
    const [first] = (await once(answer, "data")) as [Buffer];
    assert.equal(first.toString(), "got 1500", "the first chunk came before the last was sent");
    answer.resume();
    await once(answer, "end");
    assert.deepEqual(outcomes, [{ kind: "relayed", status: 200 }]);
  });

  it("sends a body the caller read whole with its length, adds response headers", async () => {
    const upstream = await listen((req, res) => {
      let body = "";
      req.on("data", (chunk) => {
        body += chunk;
      });
      req.on("end", () =>
        res.end(`${req.headers["content-length"]}|${req.headers["transfer-encoding"]}|${body}`),
      );
    });
    const { port } = await front(upstream, {
      body: Buffer.from("placed"),
      responseHeaders: ["X-Added", "1"],
    });
    const res = await send(port, { method: "POST", body: "ignored" });
    assert.equal(res.body, "6|undefined|placed");
    assert.equal(res.headers["x-added"], "1");
  });

  it("hands intercepted answers to the caller, unsent", async () => {
    const upstream = await listen((_req, res) => {
      res.writeHead(429, { "content-type": "application/json" }).end('{"reason":"full"}');
    });
    const { port, outcomes } = await front(upstream, { intercept: (status) => status === 429 });
    const res = await send(port);
    assert.equal(res.status, 599);
    assert.equal(outcomes[0]?.kind, "intercepted");
    assert.equal(
      outcomes[0]?.kind === "intercepted" && outcomes[0].body.toString(),
      '{"reason":"full"}',
    );
  });

  it("leaves an unreachable upstream to the caller, or refuses as told", async () => {
    const closed = await closedPort();
    const unanswered = await front(closed);
    assert.equal((await send(unanswered.port)).status, 599);
    const [outcome] = unanswered.outcomes;
    assert.equal(outcome?.kind, "unreachable");
    assert.equal(outcome?.kind === "unreachable" && outcome.connected, false);

    const refusing = await front(closed, {
      refuse: (err, connected) => ({
        message: `${(err as NodeJS.ErrnoException).code} ${connected}`,
        code: 502,
      }),
    });
    const res = await send(refusing.port);
    assert.equal(res.status, 502);
    assert.equal(res.headers["access-control-allow-origin"], "*");
    assert.deepEqual(JSON.parse(res.body), { message: "ECONNREFUSED false", code: 502 });
    assert.deepEqual(refusing.outcomes, [{ kind: "ended", status: 502 }]);
  });

  it("settles when the upstream switches protocols for a plain request (no answer to relay)", async () => {
    // A raw upstream that answers 101 to anything: Node's client drops such a socket without
    // an error, which left the exchange waiting for good.
    const raw = await new Promise<number>((resolve) => {
      const server = createNetServer((socket) => {
        rawSockets.push(socket);
        socket.on("error", () => {});
        socket.once("data", () =>
          socket.write(
            "HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\nconnection: upgrade\r\n\r\n",
          ),
        );
      });
      netServers.push(server);
      server.listen(0, "127.0.0.1", () => resolve((server.address() as AddressInfo).port));
    });
    const { port, outcomes } = await front(raw, { headTimeoutMs: 60_000 });
    const started = performance.now();
    assert.equal((await send(port)).status, 599, "left to the caller at once");
    assert.ok(performance.now() - started < 5_000, "not after the head timeout");
    assert.equal(outcomes[0]?.kind, "unreachable");
  });

  it("bounds the time to a response head", async () => {
    const upstream = await listen(() => {
      // Never answers.
    });
    const { port, outcomes } = await front(upstream, { headTimeoutMs: 200 });
    assert.equal((await send(port)).status, 599);
    const [outcome] = outcomes;
    assert.equal(outcome?.kind === "unreachable" && outcome.connected, true);
    assert.equal(
      outcome?.kind === "unreachable" && (outcome.error as NodeJS.ErrnoException).code,
      HEAD_TIMEOUT,
    );
  });

  it("retries once when a reused pooled connection was reset", async () => {
    const served = new WeakMap<Socket, number>();
    const upstream = await listen((req, res) => {
      const count = (served.get(req.socket) ?? 0) + 1;
      served.set(req.socket, count);
      // A keep-alive connection the server drops as it is reused.
      if (count > 1) req.socket.resetAndDestroy();
      else res.end(`fresh ${count}`);
    });
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    after(() => agent.destroy());
    const { port } = await front(upstream, { agent });
    assert.equal((await send(port)).body, "fresh 1");
    await new Promise((resolve) => setTimeout(resolve, 50));
    const again = await send(port);
    assert.equal(again.status, 200);
    assert.equal(again.body, "fresh 1", "answered on a new connection");
  });

  it("tries the fallback when the address refuses the connection", async () => {
    const behind = await listen((_req, res) => res.end("through the fallback"));
    const { port } = await front(await closedPort(), {
      fallback: async () => {
        const socket = connect(behind, "127.0.0.1");
        await once(socket, "connect");
        return socket;
      },
    });
    assert.equal((await send(port)).body, "through the fallback");
  });

  it("a cut ends the exchange with its refusal and outcome", async () => {
    const cuts = new Set<(why: Cut) => void>();
    const ended: string[] = [];
    const upstream = await listen(() => {
      // Never answers: the cut ends it.
    });
    const { port } = await front(upstream, {
      track: (cut) => {
        cuts.add(cut);
        return () => cuts.delete(cut);
      },
      observer: {
        ended: (outcome, status) => ended.push(`${outcome} ${status}`),
        failed: () => ended.push("failed"),
      },
    });
    const pending = send(port);
    while (cuts.size === 0) await new Promise((resolve) => setTimeout(resolve, 10));
    for (const cut of cuts) cut({ outcome: "stopped", refusal: { message: "gone", code: 502 } });
    const res = await pending;
    assert.equal(res.status, 502);
    assert.deepEqual(JSON.parse(res.body), { message: "gone", code: 502 });
    assert.deepEqual(ended, ["stopped 502"]);
    assert.equal(cuts.size, 0, "untracked once over");
  });
});
