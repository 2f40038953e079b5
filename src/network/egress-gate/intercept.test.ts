// The TLS-terminating path of the egress gate, on loopback: a client standing in for the
// guest (trusting the gate's CA alone), interceptTls, and real HTTPS upstreams whose
// certificates come from a CA of the test's own, trusted by the gate as upstreamCa.
import assert from "node:assert/strict";
import type { IncomingHttpHeaders } from "node:http";
import { Agent, createServer as createHttpsServer, request, type Server } from "node:https";
import { type AddressInfo, connect, createServer, type Socket } from "node:net";
import { after, before, describe, it } from "node:test";
import {
  createSecureContext,
  createServer as createTlsServer,
  connect as tlsConnect,
} from "node:tls";
import { createTestCa } from "../../../test/helpers/test-ca.js";
import { type HeaderRule, SecretHostRefusedError } from "./header-rules.js";
import { interceptTls } from "./intercept.js";

const NAME = "api.ruled.test";
const gateCa = createTestCa("test gate CA");
const upstreamCa = createTestCa("test upstream CA");
const strangerCa = createTestCa("a CA nobody trusts");

interface Seen {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/** An HTTPS server recording what it is sent; answers "ok <n>", or echoes an upgrade's bytes. */
async function upstream(tls: { cert: string; key: string }) {
  const seen: Seen[] = [];
  const server: Server = createHttpsServer(tls, (req, res) => {
    let body = "";
    req.on("data", (chunk) => {
      body += chunk;
    });
    req.on("end", () => {
      seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body });
      res.setHeader("x-upstream", "yes");
      res.end(`ok ${seen.length}`);
    });
  });
  server.on("upgrade", (req, socket: Socket) => {
    seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: "" });
    socket.write(
      "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n",
    );
    socket.pipe(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { seen, server, port: (server.address() as AddressInfo).port };
}

let nameCertificate: ReturnType<typeof upstreamCa.issue> | undefined;

/** A TLS upstream for NAME answering every connection's first bytes with `raw`, as it is. */
async function rawUpstream(raw: string | Buffer) {
  nameCertificate ??= upstreamCa.issue(NAME);
  const server = createTlsServer(nameCertificate, (socket) => {
    socket.on("error", () => {});
    socket.once("data", () => socket.end(raw));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    close: () => server.close(),
  };
}

/** A guest's TLS connection to the gate sending `raw`; what came back until it closed. */
function rawRequest(port: number, raw: string, ms = 3000): Promise<string> {
  return new Promise((resolve) => {
    const socket = tlsConnect({ host: "127.0.0.1", port, servername: NAME, ca: gateCa.cert });
    let text = "";
    const timer = setTimeout(() => {
      socket.destroy();
      resolve(text);
    }, ms);
    socket.setEncoding("latin1");
    socket.on("data", (chunk: string) => {
      text += chunk;
    });
    socket.on("error", () => {});
    socket.once("secureConnect", () => socket.write(raw));
    socket.once("close", () => {
      clearTimeout(timer);
      resolve(text);
    });
  });
}

describe("interceptTls", () => {
  const secrets = new Map([["api-key", "s3cr3t-value"]]);
  let rules: HeaderRule = {
    domain: NAME,
    headers: [["authorization", "Bearer ${e2b.secrets.api-key}"]],
  };
  let good: Awaited<ReturnType<typeof upstream>>;
  let stranger: Awaited<ReturnType<typeof upstream>>;
  let otherName: Awaited<ReturnType<typeof upstream>>;
  const gates: { close(): void; port: number }[] = [];

  /** A listener handing each connection to interceptTls towards `port`, as the gate does. */
  async function gateTo(port: number) {
    const server = createServer({ pauseOnConnect: true }, (guest) => {
      guest.once("data", (head) => {
        guest.pause();
        void interceptTls(
          guest,
          head,
          { name: NAME, address: "127.0.0.1", port },
          {
            interception: {
              contextFor: async (name) => createSecureContext(gateCa.issue(name)),
              upstreamCa: [upstreamCa.cert],
              secretValue: async (team, name, host) => {
                // "bound" is bound to another host than the one the gate serves here.
                if (name === "bound" && host !== "elsewhere.test") {
                  throw new SecretHostRefusedError(name, host);
                }
                return team === "team-1" ? secrets.get(name) : undefined;
              },
            },
            rule: () => rules,
            team: () => "team-1",
            handshakeTimeoutMs: 500,
            upstreamHeadTimeoutMs: 1000,
          },
        );
      });
      guest.resume();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const gate = { close: () => server.close(), port: (server.address() as AddressInfo).port };
    gates.push(gate);
    return gate.port;
  }

  /** A request as the guest makes it, trusting the gate's CA alone. */
  function send(
    port: number,
    options: {
      method?: string;
      headers?: Record<string, string>;
      body?: string;
      agent?: Agent;
    } = {},
  ): Promise<{ status: number; body: string; headers: IncomingHttpHeaders }> {
    return new Promise((resolve, reject) => {
      const req = request(
        {
          host: "127.0.0.1",
          port,
          servername: NAME,
          ca: gateCa.cert,
          method: options.method ?? "GET",
          path: "/v1/things?x=1",
          headers: { host: NAME, ...options.headers },
          agent: options.agent ?? false,
        },
        (res) => {
          let body = "";
          res.on("data", (chunk) => {
            body += chunk;
          });
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
        },
      );
      req.on("error", reject);
      req.end(options.body);
    });
  }

  before(async () => {
    good = await upstream(upstreamCa.issue(NAME));
    stranger = await upstream(strangerCa.issue(NAME));
    otherName = await upstream(upstreamCa.issue("other.test"));
  });

  after(() => {
    for (const gate of gates) gate.close();
    for (const u of [good, stranger, otherName]) u?.server.close();
  });

  it("sets the rule's headers with the secret filled in, over keep-alive, bodies intact", async () => {
    const port = await gateTo(good.port);
    const agent = new Agent({ keepAlive: true, maxSockets: 1, ca: gateCa.cert });
    const first = await send(port, {
      agent,
      headers: { authorization: "Bearer guess", "x-mine": "kept" },
    });
    assert.equal(first.status, 200);
    assert.equal(first.body, "ok 1");
    assert.equal(first.headers["x-upstream"], "yes");
    const posted = await send(port, { agent, method: "POST", body: "x".repeat(100_000) });
    assert.equal(posted.body, "ok 2");
    agent.destroy();
    const [get, post] = good.seen;
    assert.equal(get?.url, "/v1/things?x=1");
    assert.equal(get?.headers.authorization, "Bearer s3cr3t-value", "the guest's own is replaced");
    assert.equal(get?.headers["x-mine"], "kept");
    assert.equal(get?.headers.host, NAME);
    // The gate is the guest's way out, not a reverse proxy: it adds no forwarding headers.
    for (const name of ["x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "via"])
      assert.equal(get?.headers[name], undefined, name);
    assert.equal(post?.method, "POST");
    assert.equal(post?.body.length, 100_000);
    assert.equal(post?.headers.authorization, "Bearer s3cr3t-value");
  });

  it("reads the rule at each request: a change applies to a connection already open", async () => {
    const port = await gateTo(good.port);
    const agent = new Agent({ keepAlive: true, maxSockets: 1, ca: gateCa.cert });
    const before = good.seen.length;
    await send(port, { agent });
    rules = { domain: NAME, headers: [["x-team", "literal"]] };
    await send(port, { agent });
    agent.destroy();
    rules = { domain: NAME, headers: [["authorization", "Bearer ${e2b.secrets.api-key}"]] };
    const [a, b] = good.seen.slice(before);
    assert.equal(a?.headers.authorization, "Bearer s3cr3t-value");
    assert.equal(b?.headers.authorization, undefined);
    assert.equal(b?.headers["x-team"], "literal");
  });

  it("fails a request naming a secret the team lacks, and sends nothing upstream", async () => {
    const port = await gateTo(good.port);
    const before = good.seen.length;
    rules = { domain: NAME, headers: [["authorization", "${e2b.secrets.nope}"]] };
    const res = await send(port);
    rules = { domain: NAME, headers: [["authorization", "Bearer ${e2b.secrets.api-key}"]] };
    assert.equal(res.status, 502);
    assert.match(res.body, /names secret "nope", which this sandbox's team does not have/);
    assert.equal(good.seen.length, before);
  });

  it("sends nothing when a secret is bound to other hosts than the request's", async () => {
    const port = await gateTo(good.port);
    const before = good.seen.length;
    rules = { domain: NAME, headers: [["authorization", "${e2b.secrets.bound}"]] };
    const res = await send(port);
    rules = { domain: NAME, headers: [["authorization", "Bearer ${e2b.secrets.api-key}"]] };
    assert.equal(res.status, 502);
    assert.match(res.body, /names secret "bound", which is bound to other hosts/);
    assert.equal(good.seen.length, before);
  });

  it("refuses another Host on the connection (421): a shared front would route it elsewhere", async () => {
    const port = await gateTo(good.port);
    const before = good.seen.length;
    const res = await send(port, { headers: { host: "evil.test" } });
    assert.equal(res.status, 421);
    assert.match(res.body, /this connection is for api\.ruled\.test, not "evil\.test"/);
    assert.equal(good.seen.length, before);
  });

  it("sends nothing to an upstream whose certificate is not trusted or not for the name", async () => {
    for (const server of [stranger, otherName]) {
      const res = await send(await gateTo(server.port));
      assert.equal(res.status, 502);
      assert.match(res.body, /api\.ruled\.test's certificate is not trusted \(\w+\)/);
      assert.equal(server.seen.length, 0);
    }
  });

  it("carries an upgrade (WebSocket) with the headers set, then bytes both ways", async () => {
    const port = await gateTo(good.port);
    const before = good.seen.length;
    const echoed = await new Promise<string>((resolve, reject) => {
      const req = request({
        host: "127.0.0.1",
        port,
        servername: NAME,
        ca: gateCa.cert,
        path: "/ws",
        headers: { host: NAME, connection: "Upgrade", upgrade: "websocket" },
        agent: false,
      });
      req.on("upgrade", (res, socket) => {
        assert.equal(res.statusCode, 101);
        socket.write("ping");
        socket.once("data", (data) => {
          resolve(String(data));
          socket.destroy();
        });
      });
      req.on("error", reject);
      req.end();
    });
    assert.equal(echoed, "ping");
    const seen = good.seen[before];
    assert.equal(seen?.url, "/ws");
    assert.equal(seen?.headers.authorization, "Bearer s3cr3t-value");
    assert.equal(seen?.headers.upgrade, "websocket");
  });

  it("answers 502 when the upstream's status cannot be relayed (099), and goes on serving", async () => {
    const odd = await rawUpstream("HTTP/1.1 099 Odd\r\ncontent-length: 0\r\n\r\n");
    try {
      const res = await send(await gateTo(odd.port));
      assert.equal(res.status, 502);
      assert.match(res.body, /^warren egress: /);
    } finally {
      odd.close();
    }
    assert.equal((await send(await gateTo(good.port))).status, 200);
  });

  it("never throws on a hostile upstream head: 502 or the answer relayed, nothing else", async () => {
    const heads: [string, number | "any"][] = [
      ["HTTP/1.1 1000 Big\r\ncontent-length: 0\r\n\r\n", 502],
      ["HTTP/1.1 000 Zero\r\ncontent-length: 0\r\n\r\n", 502],
      ["HTTP/1.1 200 OK\r\nx-bad: a\x01b\r\ncontent-length: 0\r\n\r\n", 502],
      ["HTTP/1.1 200 OK\r\nbad name: x\r\ncontent-length: 0\r\n\r\n", 502],
      ["HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok", 502],
      ["HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 2\r\n\r\nok", 502],
      ["HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\nconnection: upgrade\r\n\r\n", "any"],
      [
        "HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
        200,
      ],
      ["HTTP/1.1 600 Odd\r\ncontent-length: 2\r\n\r\nok", 600],
      ["HTTP/1.1 200 \xff\xfe\r\nx-obs: caf\xe9\r\ncontent-length: 2\r\n\r\nok", "any"],
      ["HTTP/1.1 200 OK\r\nconnection: x-secret, close\r\nx-secret: 1\r\n\r\nok", 200],
      ["SSH-2.0-OpenSSH_9.2\r\n", 502],
      ["", 502],
    ];
    for (const [head, status] of heads) {
      const odd = await rawUpstream(Buffer.from(head, "latin1"));
      try {
        const res = await send(await gateTo(odd.port)).catch((err: Error) => ({
          status: 0,
          body: err.message,
          headers: {},
        }));
        if (status === "any") assert.notEqual(res.status, 0, JSON.stringify(head));
        else assert.equal(res.status, status, `${JSON.stringify(head)}: ${res.body}`);
        // (The one answer relay cannot settle, a 101 never asked for, is cut with its JSON.)
        if (res.status === 502) assert.match(res.body, /warren egress: /);
        assert.equal("x-secret" in res.headers, false, "a header Connection names is dropped");
      } finally {
        odd.close();
      }
    }
    assert.equal((await send(await gateTo(good.port))).status, 200);
  });

  it("refuses targets that are not origin-form (400), sending nothing upstream", async () => {
    const port = await gateTo(good.port);
    const before = good.seen.length;
    for (const target of ["https://evil.example/steal", "http://api.ruled.test/x", "*"]) {
      const answer = await rawRequest(
        port,
        `GET ${target} HTTP/1.1\r\nHost: ${NAME}\r\nConnection: close\r\n\r\n`,
      );
      assert.match(answer, /^HTTP\/1\.1 400 /, target);
      assert.match(answer, /warren egress: /, target);
    }
    // Authority-form outside CONNECT: Node's parser takes it for no URL at all.
    const authority = await rawRequest(
      port,
      `GET evil.example:443 HTTP/1.1\r\nHost: ${NAME}\r\n\r\n`,
    );
    assert.doesNotMatch(authority, /^HTTP\/1\.1 [23]/);
    assert.equal(good.seen.length, before);
  });

  it("refuses CONNECT and TRACE (405) and a request with two Host headers (400)", async () => {
    const port = await gateTo(good.port);
    const before = good.seen.length;
    const connectAnswer = await rawRequest(
      port,
      `CONNECT evil.example:443 HTTP/1.1\r\nHost: ${NAME}\r\n\r\n`,
    );
    assert.match(connectAnswer, /^HTTP\/1\.1 405 /);
    const trace = await rawRequest(
      port,
      `TRACE / HTTP/1.1\r\nHost: ${NAME}\r\nConnection: close\r\n\r\n`,
    );
    assert.match(trace, /^HTTP\/1\.1 405 /);
    const twoHosts = await rawRequest(
      port,
      `GET / HTTP/1.1\r\nHost: ${NAME}\r\nHost: evil.example\r\nConnection: close\r\n\r\n`,
    );
    assert.match(twoHosts, /^HTTP\/1\.1 400 /);
    assert.equal(good.seen.length, before);
  });

  it("a guest that never finishes its handshake is dropped with its connection", async () => {
    const port = await gateTo(good.port);
    const socket = connect(port, "127.0.0.1");
    socket.on("error", () => {});
    socket.resume();
    // A ClientHello's start, the rest never sent.
    socket.write(Buffer.from([0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5]));
    await new Promise((resolve) => socket.once("close", resolve));
  });
});
