// Fuzz of the egress gate from a hostile guest's side (fast-check), on loopback: DNS queries
// over UDP and TCP (random bytes, dns-packet encodings of odd packets, valid queries mutated:
// flipped and truncated bytes, counts of 65535, compression pointers into loops or past the
// end; TCP length prefixes that lie), and HTTP/1.1 request heads, random and mutated (methods,
// targets, versions, Host, framing, line endings, bytes flipped), at the plain-HTTP path (after
// an allowed request, and as a connection's first bytes) and at the TLS interceptor.
// Properties: nothing throws uncaught (node:test fails the file on it), no request reaches an
// upstream but an origin-form one for the allowed name (and, intercepted, with the rule's header
// exactly as the rule fills it), the gate answers a valid query and relays a valid request
// afterwards, and the heap stays bounded. WARREN_FUZZ_SEED replays, WARREN_FUZZ_RUNS scales.
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer as createHttpsServer } from "node:https";
import { type AddressInfo, connect, createServer, type Socket } from "node:net";
import { after, before, type TestContext, test } from "node:test";
import { createSecureContext, connect as tlsConnect } from "node:tls";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import * as dnsPacket from "dns-packet";
import {
  fc,
  fuzzParameters,
  headerName,
  headerValue,
  reportCases,
} from "../../../test/helpers/fuzz.js";
import {
  askUdp,
  dnsQuery,
  type LoopbackGate,
  loopbackGate,
  RawGuest,
  recordingUpstream,
  type Seen,
  table,
} from "../../../test/helpers/loopback-gate.js";
import { createTestCa } from "../../../test/helpers/test-ca.js";
import { interceptTls } from "./intercept.js";

setFlagsFromString("--expose_gc");
const gc = runInNewContext("gc") as () => void;

const ALLOWED = "api.allowed.test";
const NAMES = table({ [ALLOWED]: ["127.0.0.1"], "evil.test": ["127.0.0.1"] });
const SECRET = "s3cr3t-value";

let upstream: Awaited<ReturnType<typeof recordingUpstream>>;
let gated: LoopbackGate;
let heapBefore = 0;

before(async () => {
  upstream = await recordingUpstream();
  gated = await loopbackGate({ allowOut: ["*.allowed.test"], denyOut: ["0.0.0.0/0"] }, NAMES);
  gated.port = upstream.port;
  gc();
  heapBefore = process.memoryUsage().heapUsed;
});

after(async () => {
  await gated.close();
  upstream.close();
});

// ---------------------------------------------------------------------------------------- DNS

const label = fc.oneof(
  fc.stringMatching(/^[a-z0-9-]{1,20}$/),
  fc.string({ unit: "binary-ascii", minLength: 1, maxLength: 63 }),
  fc.constant("x".repeat(63)),
);
const dnsName = fc.oneof(
  fc.constantFrom(ALLOWED, "evil.test", "", ".", "allowed.test", "*.allowed.test"),
  fc.array(label, { minLength: 1, maxLength: 6 }).map((labels) => labels.join(".")),
  fc
    .array(label, { minLength: 1, maxLength: 6 })
    .map((labels) => `${labels.join(".")}.allowed.test`),
);
const recordType = fc.constantFrom<dnsPacket.RecordType>(
  "A",
  "AAAA",
  "TXT",
  "PTR",
  "MX",
  "CNAME",
  "SRV",
  "NS",
  "SOA",
);

/** A packet dns-packet can encode, odd in every field it lets one be. */
const encoded = fc
  .record({
    type: fc.constantFrom<"query" | "response">("query", "response"),
    id: fc.integer({ min: 0, max: 65535 }),
    flags: fc.integer({ min: 0, max: 65535 }),
    questions: fc.array(
      fc.record({
        type: recordType,
        name: dnsName,
        class: fc.constantFrom<dnsPacket.RecordClass>("IN", "CH", "ANY"),
      }),
      { maxLength: 4 },
    ),
    answers: fc.array(
      fc.record({ type: fc.constant<"A">("A"), name: dnsName, data: fc.ipV4(), ttl: fc.nat() }),
      { maxLength: 2 },
    ),
  })
  .map((packet) => {
    try {
      return dnsPacket.encode(packet as dnsPacket.Packet);
    } catch {
      return Buffer.from("not encodable");
    }
  });

/** A valid query, then broken: bytes flipped, cut, counts inflated, names turned into pointer loops. */
const mutated = fc
  .tuple(
    dnsName,
    fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 6 }),
    fc.option(fc.nat(), { nil: undefined }),
    fc.constantFrom("none", "counts", "self-pointer", "pointer-past-end", "pointer-loop"),
  )
  .map(([name, flips, cut, trick]) => {
    const query = Buffer.from(dnsQuery(name.replace(/[^\x20-\x7e]/g, "x") || "a.test"));
    for (const [at, byte] of flips) query[at % query.length] = byte;
    if (trick === "counts") {
      query.writeUInt32BE(0xffffffff, 4);
      query.writeUInt32BE(0xffffffff, 8);
    }
    if (trick === "self-pointer") query.writeUInt16BE(0xc00c, 12);
    if (trick === "pointer-past-end") query.writeUInt16BE(0xc000 | 0x3fff, 12);
    if (trick === "pointer-loop") {
      // Two names pointing at each other.
      const loop = Buffer.from([0xc0, 0x0e, 0xc0, 0x0c, 0, 1, 0, 1]);
      return Buffer.concat([query.subarray(0, 12), loop]);
    }
    return cut === undefined ? query : query.subarray(0, cut % (query.length + 1));
  });

const dnsPayload = fc.oneof(
  { weight: 2, arbitrary: fc.uint8Array({ maxLength: 600 }).map((bytes) => Buffer.from(bytes)) },
  { weight: 3, arbitrary: encoded },
  { weight: 4, arbitrary: mutated },
  { weight: 1, arbitrary: fc.constant(Buffer.alloc(5000, 0xc0)) },
);

/** TCP DNS: payloads behind true, false, zero or huge length prefixes, written in pieces. */
const dnsStream = fc
  .tuple(
    fc.array(fc.tuple(dnsPayload, fc.constantFrom("true", "short", "long", "zero", "max")), {
      minLength: 1,
      maxLength: 4,
    }),
    fc.integer({ min: 1, max: 7 }),
  )
  .map(([frames, pieces]) => {
    const bytes = Buffer.concat(
      frames.map(([payload, prefix]) => {
        const length = {
          true: payload.length,
          short: Math.max(0, payload.length - 3),
          long: payload.length + 9,
          zero: 0,
          max: 0xffff,
        }[prefix];
        const head = Buffer.alloc(2);
        head.writeUInt16BE(Math.min(length, 0xffff));
        return Buffer.concat([head, payload]);
      }),
    );
    const size = Math.ceil(bytes.length / pieces);
    return Array.from({ length: pieces }, (_, i) => bytes.subarray(i * size, (i + 1) * size));
  });

async function assertAnswers(): Promise<void> {
  const answer = await askUdp(gated.gate.addresses.dnsUdp.port, dnsQuery(ALLOWED, 4242));
  assert.equal(answer?.id, 4242, "the gate no longer answers a valid query");
  assert.deepEqual(
    answer?.answers?.map((a) => ("data" in a ? a.data : undefined)),
    ["127.0.0.1"],
  );
}

test("DNS over UDP: random, odd and mutated queries", async (t: TestContext) => {
  const port = gated.gate.addresses.dnsUdp.port;
  const client = (await import("node:dgram")).createSocket("udp4");
  client.on("message", () => {});
  client.bind(0, "127.0.0.1");
  await once(client, "listening");
  let cases = 0;
  try {
    await fc.assert(
      fc.asyncProperty(fc.array(dnsPayload, { minLength: 1, maxLength: 8 }), async (payloads) => {
        for (const payload of payloads) {
          cases++;
          client.send(payload, port, "127.0.0.1");
        }
        await new Promise((resolve) => setImmediate(resolve));
      }),
      fuzzParameters(t, 400),
    );
  } finally {
    client.close();
  }
  reportCases(t, "egress gate DNS/UDP", cases);
  await assertAnswers();
});

test("DNS over TCP: lying length prefixes, split writes, odd queries", async (t: TestContext) => {
  const port = gated.gate.addresses.dnsTcp.port;
  let cases = 0;
  await fc.assert(
    fc.asyncProperty(dnsStream, async (pieces) => {
      cases++;
      const socket = connect(port, "127.0.0.1");
      socket.on("error", () => {});
      socket.resume();
      await once(socket, "connect");
      for (const piece of pieces) socket.write(piece);
      await Promise.race([once(socket, "close"), new Promise((r) => setTimeout(r, 20))]);
      socket.destroy();
    }),
    fuzzParameters(t, 200),
  );
  reportCases(t, "egress gate DNS/TCP", cases);
  await assertAnswers();
});

// --------------------------------------------------------------------------------------- HTTP

const method = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.constantFrom("GET", "POST", "PUT", "HEAD", "DELETE", "OPTIONS", "PATCH"),
  },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      "CONNECT",
      "TRACE",
      "PRI",
      "get",
      "G ET",
      "",
      "PROPFIND",
      "M-SEARCH",
    ),
  },
  { weight: 1, arbitrary: fc.stringMatching(/^[A-Z!#$%&'*+.^_`|~-]{1,12}$/) },
);
const target = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.constantFrom("/", "/x?y=1", "/a/../b", "//evil.test/x", "/%00", "/\u00ff"),
  },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      "*",
      "http://evil.test/",
      `https://${ALLOWED}/`,
      "evil.test:80",
      `${ALLOWED}:443`,
      "HTTP://evil.test",
      "/ /",
      "",
      "/\t",
      "/x\u0000",
    ),
  },
  { weight: 1, arbitrary: fc.string({ unit: "binary-ascii", maxLength: 40 }) },
);
const version = fc.oneof(
  { weight: 6, arbitrary: fc.constant("HTTP/1.1") },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      "HTTP/1.0",
      "HTTP/2.0",
      "HTTP/1.1 ",
      "http/1.1",
      "HTTP/1",
      "HTTP/0.9",
      "",
    ),
  },
);
const host = fc.constantFrom(
  ALLOWED,
  `${ALLOWED}:80`,
  "API.ALLOWED.TEST.",
  "evil.test",
  `evil.test@${ALLOWED}`,
  `${ALLOWED}@evil.test`,
  "",
  ` ${ALLOWED}`,
  `${ALLOWED}, evil.test`,
);
const special = fc.oneof(
  host.map((h) => ["Host", h] as const),
  fc.constantFrom<readonly [string, string]>(
    ["Content-Length", "5"],
    ["Content-Length", "-1"],
    ["Content-Length", "99999999999999999999"],
    ["Content-Length", "3, 3"],
    ["Content-Length", "0x10"],
    ["Transfer-Encoding", "chunked"],
    ["Transfer-Encoding", "chunked, identity"],
    ["Transfer-Encoding", "xchunked"],
    ["Transfer-Encoding", " chunked"],
    ["Connection", "upgrade"],
    ["Connection", "close"],
    ["Connection", "host, content-length"],
    ["Upgrade", "websocket"],
    ["Upgrade", "h2c"],
    ["Expect", "100-continue"],
    ["Host ", ALLOWED],
    [" Host", "evil.test"],
  ),
);
const header = fc.oneof(
  { weight: 3, arbitrary: special },
  { weight: 2, arbitrary: fc.tuple(headerName, headerValue) },
);
const eol = fc.oneof(
  { weight: 8, arbitrary: fc.constant("\r\n") },
  { weight: 1, arbitrary: fc.constantFrom("\n", "\r", "\r\r\n") },
);

/** A request: its parts drawn above, sometimes with a body, then sometimes bytes flipped or cut. */
const hostileRequest = fc
  .record({
    method,
    target,
    version,
    headers: fc.array(header, { maxLength: 8 }),
    hostFirst: fc.boolean(),
    eol,
    body: fc.oneof(
      fc.constant(""),
      fc.string({ maxLength: 40 }),
      fc.constant("0\r\n\r\n"),
      fc.constant(`GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n`),
    ),
    flips: fc.oneof(
      fc.constant([]),
      fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), {
        minLength: 1,
        maxLength: 3,
      }),
    ),
    cut: fc.option(fc.nat(), { nil: undefined, freq: 6 }),
  })
  .map((r) => {
    const lines = [`${r.method} ${r.target} ${r.version}`];
    if (r.hostFirst) lines.push(`Host: ${ALLOWED}`);
    for (const [name, value] of r.headers) lines.push(`${name}: ${value}`);
    const bytes = Buffer.from(`${lines.join(r.eol)}${r.eol}${r.eol}${r.body}`, "latin1");
    for (const [at, byte] of r.flips) bytes[at % bytes.length] = byte;
    return r.cut === undefined ? bytes : bytes.subarray(0, r.cut % (bytes.length + 1));
  });

/** Headers a well-formed request may carry besides Host and its framing. */
const FRAMING = /^(host|content-length|transfer-encoding|connection|upgrade|expect|te|trailer)$/i;

/** A well-formed request for the allowed name (these must be relayed), body framed either way. */
const wellFormedRequest = fc
  .record({
    method: fc.constantFrom("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"),
    path: fc.string({ maxLength: 20 }).map((p) => `/${encodeURIComponent(p)}`),
    headers: fc.array(
      fc.tuple(headerName, headerValue).filter(([name]) => !FRAMING.test(name)),
      { maxLength: 6 },
    ),
    body: fc.option(fc.string({ unit: "binary-ascii", maxLength: 200 }), { nil: undefined }),
    chunked: fc.boolean(),
  })
  .map((r) => {
    const lines = [`${r.method} ${r.path} HTTP/1.1`, `Host: ${ALLOWED}`];
    for (const [name, value] of r.headers) lines.push(`${name}: ${value}`);
    let body = "";
    if (r.body !== undefined && r.chunked) {
      lines.push("Transfer-Encoding: chunked");
      const size = Buffer.byteLength(r.body, "latin1").toString(16);
      body = r.body ? `${size}\r\n${r.body}\r\n0\r\n\r\n` : "0\r\n\r\n";
    } else if (r.body !== undefined) {
      lines.push(`Content-Length: ${Buffer.byteLength(r.body, "latin1")}`);
      body = r.body;
    }
    return Buffer.from(`${lines.join("\r\n")}\r\n\r\n${body}`, "latin1");
  });

/** What a guest sends; `wellFormed` ones must be relayed (the gate refusing all would pass else). */
const requestBytes = fc.oneof(
  { weight: 1, arbitrary: wellFormedRequest.map((bytes) => ({ bytes, wellFormed: true })) },
  { weight: 3, arbitrary: hostileRequest.map((bytes) => ({ bytes, wellFormed: false })) },
);

/** What an upstream may ever see: origin-form, for the allowed name, no CONNECT or TRACE. */
function assertOnlyAllowed(seen: readonly Seen[]): void {
  for (const s of seen) {
    const name = String(s.headers.host ?? "")
      .replace(/:\d*$/, "")
      .replace(/\.$/, "")
      .toLowerCase();
    assert.equal(
      name,
      ALLOWED,
      `a request for ${JSON.stringify(s.headers.host)} reached the upstream`,
    );
    assert.ok(s.url.startsWith("/"), `target ${JSON.stringify(s.url)} reached the upstream`);
    assert.ok(!["CONNECT", "TRACE"].includes(s.method), `${s.method} reached the upstream`);
  }
}

/**
 * Sends a request, then leaves once the answer's first bytes came or the connection closed,
 * or after a moment: a well-formed one must have been answered 200 (by the upstream).
 */
async function hitAndLeave(
  socket: Socket,
  request: { bytes: Buffer; wellFormed: boolean },
): Promise<void> {
  socket.write(request.bytes);
  const answer = await new Promise<string>((resolve) => {
    socket.once("data", (chunk: Buffer) => resolve(chunk.toString("latin1")));
    socket.once("close", () => resolve(""));
    setTimeout(() => resolve(""), request.wellFormed ? 3000 : 30);
  });
  socket.destroy();
  if (request.wellFormed) {
    assert.match(answer, /^HTTP\/1\.1 200 /, JSON.stringify(request.bytes.toString("latin1")));
  }
}

async function assertRelays(): Promise<void> {
  const guest = new RawGuest(gated.gate.addresses.tcp.port);
  guest.socket.on("error", () => {});
  guest.write(`GET /after HTTP/1.1\r\nHost: ${ALLOWED}\r\n\r\n`);
  await guest.until(/ok \d+$/);
  guest.destroy();
}

test("plain HTTP: random and mutated requests after an allowed one, and as first bytes", async (t: TestContext) => {
  const port = gated.gate.addresses.tcp.port;
  let cases = 0;
  await fc.assert(
    fc.asyncProperty(requestBytes, fc.boolean(), async (request, first) => {
      cases++;
      const guest = new RawGuest(port);
      guest.socket.on("error", () => {});
      if (!first) {
        guest.write(`GET /first HTTP/1.1\r\nHost: ${ALLOWED}\r\n\r\n`);
        await guest.until(/ok \d+$/);
      }
      await hitAndLeave(guest.socket, request);
    }),
    fuzzParameters(t, 250),
  );
  // Whatever was still on its way.
  await new Promise((resolve) => setTimeout(resolve, 100));
  reportCases(t, "egress gate plain HTTP", cases);
  t.diagnostic(`${upstream.seen.length} requests reached the upstream, all checked below`);
  assertOnlyAllowed(upstream.seen);
  await assertRelays();
});

test("TLS interceptor: random and mutated requests", async (t: TestContext) => {
  const gateCa = createTestCa("fuzz gate CA");
  const upstreamCa = createTestCa("fuzz upstream CA");
  const seen: Seen[] = [];
  const ruled = createHttpsServer(upstreamCa.issue(ALLOWED), (req, res) => {
    req.resume();
    req.on("end", () => {
      seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: "" });
      res.end("ok");
    });
  });
  ruled.listen(0, "127.0.0.1");
  await once(ruled, "listening");
  const context = createSecureContext(gateCa.issue(ALLOWED));
  const listener = createServer({ pauseOnConnect: true }, (guest: Socket) => {
    guest.on("error", () => {});
    guest.once("data", (head: Buffer) => {
      guest.pause();
      void interceptTls(
        guest,
        head,
        { name: ALLOWED, address: "127.0.0.1", port: (ruled.address() as AddressInfo).port },
        {
          interception: {
            contextFor: async () => context,
            upstreamCa: [upstreamCa.cert],
            secretValue: async () => SECRET,
          },
          rule: () => ({
            domain: ALLOWED,
            headers: [["authorization", "Bearer ${e2b.secrets.k}"]],
          }),
          team: () => "team",
          upstreamHeadTimeoutMs: 1000,
        },
      ).catch(() => guest.destroy());
    });
    guest.resume();
  });
  listener.listen(0, "127.0.0.1");
  await once(listener, "listening");
  const port = (listener.address() as AddressInfo).port;
  let cases = 0;
  try {
    await fc.assert(
      fc.asyncProperty(requestBytes, async (request) => {
        cases++;
        const socket = tlsConnect({
          host: "127.0.0.1",
          port,
          servername: ALLOWED,
          ca: gateCa.cert,
        });
        socket.on("error", () => {});
        socket.resume();
        await Promise.race([once(socket, "secureConnect"), once(socket, "close")]);
        await hitAndLeave(socket, request);
      }),
      fuzzParameters(t, 120),
    );
    await new Promise((resolve) => setTimeout(resolve, 100));
    reportCases(t, "egress gate TLS interceptor", cases);
    t.diagnostic(`${seen.length} requests reached the upstream, all checked below`);
    assertOnlyAllowed(seen);
    for (const s of seen) assert.equal(s.headers.authorization, `Bearer ${SECRET}`);
  } finally {
    listener.close();
    ruled.closeAllConnections();
    ruled.close();
  }
});

test("after all of it: the gate still answers and relays, the heap is bounded", async (t) => {
  await assertAnswers();
  await assertRelays();
  gc();
  const grown = process.memoryUsage().heapUsed - heapBefore;
  t.diagnostic(`heap grown by ${Math.round(grown / 1024)} KiB over the fuzz run`);
  assert.ok(grown < 32 * 1024 * 1024, `the heap grew by ${Math.round(grown / 1024)} KiB`);
  assert.equal(
    gated.gate.connections <= 1,
    true,
    `${gated.gate.connections} connections left open`,
  );
});
