// The egress gate as a whole on loopback (test/helpers/loopback-gate.ts): no namespace, its
// listeners on 127.0.0.1, a plain HTTP upstream recording what reaches it. The policy allows
// `*.allowed.test` by name and nothing by address, so every connection is decided by the name
// it gives.
import assert from "node:assert/strict";
import { once } from "node:events";
import { type AddressInfo, createServer } from "node:net";
import { after, before, describe, it } from "node:test";
import { connect as tlsConnect } from "node:tls";
import {
  askUdp,
  dnsQuery,
  type LoopbackGate,
  loopbackGate,
  RawGuest,
  recordingUpstream,
  table,
} from "../../../test/helpers/loopback-gate.js";
import { sniffName } from "./sniff.js";

const ONLY_ALLOWED = { allowOut: ["*.allowed.test"], denyOut: ["0.0.0.0/0"] };
const NAMES = table({
  "api.allowed.test": ["127.0.0.1"],
  "other.allowed.test": ["127.0.0.1"],
  "evil.test": ["127.0.0.1"],
});

function get(host: string, path = "/"): string {
  return `GET ${path} HTTP/1.1\r\nHost: ${host}\r\n\r\n`;
}

describe("the egress gate on plain HTTP decided by Host", () => {
  let upstream: Awaited<ReturnType<typeof recordingUpstream>>;
  let gated: LoopbackGate;
  const guests: RawGuest[] = [];

  function guest(): RawGuest {
    const g = new RawGuest(gated.gate.addresses.tcp.port);
    g.socket.on("error", () => {});
    guests.push(g);
    return g;
  }

  before(async () => {
    upstream = await recordingUpstream();
    gated = await loopbackGate(ONLY_ALLOWED, NAMES);
    gated.port = upstream.port;
  });

  after(async () => {
    for (const g of guests) g.destroy();
    await gated.close();
    upstream.close();
  });

  /** What reached the upstream since `from`, as `METHOD host url`. */
  function reached(from: number): string[] {
    return upstream.seen.slice(from).map((s) => `${s.method} ${s.headers.host} ${s.url}`);
  }

  it("relays an allowed name's requests, keep-alive, one after the other", async () => {
    const from = upstream.seen.length;
    const g = guest();
    g.write(get("api.allowed.test", "/one"));
    await g.until(/ok \d+$/);
    g.write(get("API.allowed.test:80", "/two"));
    await g.until(/ok \d+[\s\S]*ok \d+$/);
    assert.deepEqual(reached(from), ["GET api.allowed.test /one", "GET API.allowed.test:80 /two"]);
  });

  it("cuts a keep-alive connection whose next request names a host not allowed: it reaches nothing", async () => {
    const from = upstream.seen.length;
    const g = guest();
    g.write(get("api.allowed.test", "/first"));
    await g.until(/ok \d+$/);
    g.write(get("evil.test", "/second"));
    assert.notEqual(await g.ended(), "open");
    assert.deepEqual(reached(from), ["GET api.allowed.test /first"]);
  });

  it("cuts one whose next request names another allowed host: the decision was for one name", async () => {
    const from = upstream.seen.length;
    const g = guest();
    g.write(get("api.allowed.test", "/first"));
    await g.until(/ok \d+$/);
    g.write(get("other.allowed.test", "/second"));
    assert.notEqual(await g.ended(), "open");
    assert.deepEqual(reached(from), ["GET api.allowed.test /first"]);
  });

  it("cuts pipelined requests at the first one naming another host", async () => {
    const from = upstream.seen.length;
    const g = guest();
    g.write(get("api.allowed.test", "/a") + get("evil.test", "/b") + get("api.allowed.test", "/c"));
    assert.notEqual(await g.ended(), "open");
    assert.equal(
      reached(from).some((r) => !r.startsWith("GET api.allowed.test /a")),
      false,
      JSON.stringify(reached(from)),
    );
  });

  it("follows bodies by Content-Length and chunks: a request inside a body stays a body", async () => {
    const from = upstream.seen.length;
    const hidden = get("evil.test", "/hidden");
    const g = guest();
    g.write(
      `POST /cl HTTP/1.1\r\nHost: api.allowed.test\r\nContent-Length: ${hidden.length}\r\n\r\n${hidden}`,
    );
    await g.until(/ok \d+$/);
    const size = hidden.length.toString(16);
    g.write(
      `POST /chunked HTTP/1.1\r\nHost: api.allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n${size}\r\n${hidden}\r\n0\r\n\r\n`,
    );
    await g.until(/ok \d+[\s\S]*ok \d+$/);
    assert.deepEqual(reached(from), [
      "POST api.allowed.test /cl",
      "POST api.allowed.test /chunked",
    ]);
    assert.equal(upstream.seen.at(-2)?.body, hidden);
    assert.equal(upstream.seen.at(-1)?.body, hidden);
  });

  it("refuses an absolute-form target (400): a shared front would route by it", async () => {
    const from = upstream.seen.length;
    const g = guest();
    g.write("GET http://evil.test/x HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n");
    assert.match(await g.until(/\r\n\r\n/), /^HTTP\/1\.1 400 /);
    assert.match(await g.until(/warren egress: .*\n$/), /origin-form/);
    assert.deepEqual(reached(from), []);
  });

  it("refuses CONNECT and TRACE (405) and a second Host header (400); nothing goes upstream", async () => {
    const from = upstream.seen.length;
    const cases: [string, RegExp][] = [
      [
        "CONNECT api.allowed.test:80 HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n",
        /^HTTP\/1\.1 405 /,
      ],
      ["TRACE / HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n", /^HTTP\/1\.1 405 /],
      ["GET / HTTP/1.1\r\nHost: api.allowed.test\r\nHost: evil.test\r\n\r\n", /^HTTP\/1\.1 400 /],
    ];
    for (const [request, status] of cases) {
      const g = guest();
      g.write(request);
      assert.match(await g.until(/\r\n\r\n/), status, request);
    }
    assert.deepEqual(reached(from), []);
  });

  it("cuts a stream that is not HTTP after an allowed request, passing none of it on", async () => {
    const from = upstream.seen.length;
    const g = guest();
    g.write(get("api.allowed.test", "/first"));
    await g.until(/ok \d+$/);
    g.write("\x00\x01 not http at all\r\n\r\nGET / HTTP/1.1\r\nHost: evil.test\r\n\r\n");
    assert.notEqual(await g.ended(), "open");
    assert.deepEqual(reached(from), ["GET api.allowed.test /first"]);
  });

  it("passes an upgrade's bytes both ways once the upstream switched (101)", async () => {
    const from = upstream.seen.length;
    const g = guest();
    g.write(get("api.allowed.test", "/first"));
    await g.until(/ok \d+$/);
    g.write(
      "GET /ws HTTP/1.1\r\nHost: api.allowed.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    );
    await g.until(/HTTP\/1\.1 101 [\s\S]*\r\n\r\n$/);
    g.write("raw bytes, GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n");
    await g.until(/raw bytes, GET \/ HTTP\/1\.1\r\nHost: evil\.test\r\n\r\n$/);
    assert.deepEqual(reached(from), ["GET api.allowed.test /first", "GET api.allowed.test /ws"]);
  });

  it("asks for no h2c upgrade (its streams name hosts of their own): a plain answer, then closed", async () => {
    const from = upstream.seen.length;
    const g = guest();
    g.write(
      "GET /h2c HTTP/1.1\r\nHost: api.allowed.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n",
    );
    assert.match(await g.until(/ok \d+$/), /^HTTP\/1\.1 200 /);
    assert.notEqual(await g.ended(), "open");
    assert.deepEqual(reached(from), ["GET api.allowed.test /h2c"]);
    const seen = upstream.seen.at(-1);
    assert.equal(seen?.headers.upgrade, undefined);
    assert.equal(seen?.headers["http2-settings"], undefined);
  });

  it("a policy update cuts a connection it no longer allows", async () => {
    const g = guest();
    g.write(get("api.allowed.test"));
    await g.until(/ok \d+$/);
    assert.equal(gated.gate.connections >= 1, true);
    await gated.gate.update(
      (await import("../egress-policy.js")).validateEgressPolicy({
        allowInternet: true,
        allowOut: ["*.other.test"],
        denyOut: ["0.0.0.0/0"],
      }),
    );
    assert.notEqual(await g.ended(), "open");
    await gated.gate.update(
      (await import("../egress-policy.js")).validateEgressPolicy({
        allowInternet: true,
        ...ONLY_ALLOWED,
      }),
    );
  });
});

describe("the egress gate on TLS decided by SNI (no header rules)", () => {
  it("relays the bytes as they are; an upstream that refuses resets the guest", async () => {
    const received: Buffer[] = [];
    const raw = createServer((socket) => {
      socket.on("data", (chunk: Buffer) => received.push(chunk));
      socket.end("not TLS at all\n");
    });
    raw.listen(0, "127.0.0.1");
    await once(raw, "listening");
    const gated = await loopbackGate(ONLY_ALLOWED, NAMES);
    try {
      gated.port = (raw.address() as AddressInfo).port;
      const tls = tlsConnect({
        host: "127.0.0.1",
        port: gated.gate.addresses.tcp.port,
        servername: "api.allowed.test",
      });
      const ended = new Promise((resolve) => tls.once("close", resolve));
      tls.on("error", () => {});
      await ended;
      assert.equal(
        sniffName(Buffer.concat(received)).kind,
        "name",
        "the ClientHello went on whole",
      );
      raw.close();
      // Nothing listens there now: the gate's upstream connection is refused.
      const g = new RawGuest(gated.gate.addresses.tcp.port);
      g.socket.on("error", () => {});
      const hello = Buffer.concat(received);
      g.write(hello);
      assert.notEqual(await g.ended(), "open");
      assert.equal(gated.gate.connections, 0);
    } finally {
      await gated.close();
      raw.close();
    }
  });
});

describe("the egress gate's own faults", () => {
  it("a limit that cannot be read fails the connection and the query at hand, nothing else", async () => {
    let broken = false;
    const upstream = await recordingUpstream();
    const gated = await loopbackGate(ONLY_ALLOWED, NAMES, {
      limits: () => {
        if (broken) throw new Error("the host's addresses cannot be read");
        return { never: [], restricted: [] };
      },
    });
    gated.port = upstream.port;
    try {
      broken = true;
      const g = new RawGuest(gated.gate.addresses.tcp.port);
      g.socket.on("error", () => {});
      g.write(get("api.allowed.test"));
      assert.notEqual(await g.ended(), "open");
      const dns = gated.gate.addresses.dnsUdp.port;
      assert.equal(await askUdp(dns, dnsQuery("api.allowed.test"), 300), undefined);
      broken = false;
      const again = new RawGuest(gated.gate.addresses.tcp.port);
      again.write(get("api.allowed.test"));
      await again.until(/ok \d+$/);
      again.destroy();
      assert.equal((await askUdp(dns, dnsQuery("api.allowed.test", 3)))?.id, 3);
    } finally {
      await gated.close();
      upstream.close();
    }
  });
});

describe("the egress gate's DNS", () => {
  it("an answer ready after the gate closed goes nowhere, and throws nothing", async () => {
    let release: (addresses: readonly string[]) => void = () => {};
    let asked: () => void = () => {};
    const lookup = new Promise<void>((resolve) => {
      asked = resolve;
    });
    const gated = await loopbackGate(ONLY_ALLOWED, (name) => {
      asked();
      return name === "slow.allowed.test"
        ? new Promise((resolve) => {
            release = resolve;
          })
        : Promise.resolve([]);
    });
    const answer = askUdp(gated.gate.addresses.dnsUdp.port, dnsQuery("slow.allowed.test"), 500);
    await lookup;
    await gated.close();
    release(["198.51.100.1"]);
    assert.equal(await answer, undefined);
    // Whatever the late answer did happens now: the process must still be here after it.
    await new Promise((resolve) => setTimeout(resolve, 50));
  });

  it("answers allowed names and NXDOMAIN for the rest, over UDP", async () => {
    const gated = await loopbackGate(ONLY_ALLOWED, NAMES);
    try {
      const port = gated.gate.addresses.dnsUdp.port;
      const allowed = await askUdp(port, dnsQuery("api.allowed.test", 5));
      assert.equal(allowed?.id, 5);
      assert.deepEqual(
        allowed?.answers?.map((a) => ("data" in a ? a.data : undefined)),
        ["127.0.0.1"],
      );
      assert.equal((await askUdp(port, dnsQuery("evil.test")))?.rcode, "NXDOMAIN");
    } finally {
      await gated.close();
    }
  });
});
