import assert from "node:assert/strict";
import { test } from "node:test";
import {
  isSandboxHost,
  parseTarget,
  type TargetInput,
} from "../../../src/protocol/sandbox-target.js";
import { isInternalEnvdPath, ROUTING_HEADERS, tokenMatches } from "../../../src/proxy/access.js";
import {
  relayResponseHeaders as downstreamResponseHeaders,
  requestPath,
  relayRequestHeaders as upstreamRequestHeaders,
} from "../../../src/relay/index.js";

// Pure parts of the proxy: target parsing, internal-path refusal, token compare, headers.

function target(input: Partial<TargetInput>) {
  return parseTarget({ host: undefined, sandboxId: undefined, sandboxPort: undefined, ...input });
}

test("Host routing: the first label is <port>-<sandboxId>", () => {
  assert.deepEqual(target({ host: "49983-abc123.example.test" }), {
    ok: true,
    target: { sandboxId: "abc123", port: 49983, via: "host" },
  });
  assert.deepEqual(target({ host: "3000-i0x9.sandboxes.warren.lan:8443" }), {
    ok: true,
    target: { sandboxId: "i0x9", port: 3000, via: "host" },
  });
  // DNS names are case-insensitive; a trailing dot is a fully qualified name.
  assert.deepEqual(target({ host: "8080-ABC.Example.Test." }), {
    ok: true,
    target: { sandboxId: "abc", port: 8080, via: "host" },
  });
});

test("Host routing refuses bad ports, bad ids and hosts with no target", () => {
  for (const host of [
    "0-abc.example.test",
    "65536-abc.example.test",
    "123456-abc.example.test",
    "49983-ab-c.example.test",
    "49983-ab_c.example.test",
    "x49983-abc.example.test",
    "-abc.example.test",
    "49983-.example.test",
    "49983-abc", // one label: no domain
    "api.example.test",
    "localhost:3000",
    "127.0.0.1:3000",
    "",
  ]) {
    const result = target({ host });
    assert.equal(result.ok, false, host);
  }
  assert.equal(target({ host: undefined }).ok, false);
  const zero = target({ host: "0-abc.example.test" });
  assert.ok(!zero.ok && zero.message.includes("1-65535"));
});

test("header routing on localhost, IP literals and sandbox.<domain>; port defaults to envd", () => {
  for (const host of [
    "localhost",
    "localhost:3000",
    "127.0.0.1:3000",
    "10.0.0.5",
    "[::1]:3000",
    "[::1]",
    "sandbox.example.test",
    "sandbox.e2b.warren.lan:443",
  ]) {
    assert.deepEqual(
      target({ host, sandboxId: "abc", sandboxPort: "8080" }),
      { ok: true, target: { sandboxId: "abc", port: 8080, via: "header" } },
      host,
    );
    assert.deepEqual(
      target({ host, sandboxId: "abc" }),
      { ok: true, target: { sandboxId: "abc", port: 49983, via: "header" } },
      host,
    );
  }
});

test("header routing refuses bad ids and ports", () => {
  for (const [sandboxId, sandboxPort] of [
    ["ABC", "49983"],
    ["a-b", "49983"],
    ["a.b", "49983"],
    ["", "49983"],
    ["abc, def", "49983"],
    ["abc", "0"],
    ["abc", "65536"],
    ["abc", "80a"],
    ["abc", ""],
    ["abc", "-1"],
  ] as const) {
    const result = target({ host: "localhost", sandboxId, sandboxPort });
    assert.equal(result.ok, false, `${sandboxId} ${sandboxPort}`);
  }
});

test("a <port>-<id> Host wins over headers; other hosts fall back to the headers", () => {
  assert.deepEqual(target({ host: "3000-abc.example.test", sandboxId: "zzz" }), {
    ok: true,
    target: { sandboxId: "abc", port: 3000, via: "host" },
  });
  assert.deepEqual(target({ host: "warren.lan:3000", sandboxId: "zzz", sandboxPort: "80" }), {
    ok: true,
    target: { sandboxId: "zzz", port: 80, via: "header" },
  });
});

test("domain: Host routing and sandbox.<domain> only under it", () => {
  const domain = "sbx.example.test";
  assert.deepEqual(target({ host: "3000-abc.sbx.example.test", domain }), {
    ok: true,
    target: { sandboxId: "abc", port: 3000, via: "host" },
  });
  assert.equal(target({ host: "3000-abc.other.test", domain }).ok, false);
  assert.equal(target({ host: "3000-abc.x.sbx.example.test", domain }).ok, false);
  assert.equal(isSandboxHost("3000-abc.sbx.example.test", domain), true);
  assert.equal(isSandboxHost("3000-abc.other.test", domain), false);
  assert.equal(isSandboxHost("3000-abc.other.test"), true);
});

test("isSandboxHost: digits, dash, [a-z0-9]+ in the first label", () => {
  assert.equal(isSandboxHost("49983-abc.example.test"), true);
  assert.equal(isSandboxHost("99999-abc.example.test:80"), true); // refused later with 400
  assert.equal(isSandboxHost("api.example.test"), false);
  assert.equal(isSandboxHost("localhost:3000"), false);
  assert.equal(isSandboxHost("127.0.0.1"), false);
  assert.equal(isSandboxHost("my-host.example.test"), false);
  assert.equal(isSandboxHost(undefined), false);
});

test("internal envd paths are refused in every spelling", () => {
  for (const path of [
    "/init",
    "/init?x=1",
    "/init/",
    "/init/anything",
    "/INIT",
    "//init",
    "/./init",
    "/files/../init",
    "/%69nit",
    "/%2e/init",
    "/freeze",
    "/unfreeze",
    "/fsfreeze",
    "/fsthaw",
    "/collapse",
    "/upgrade",
    "/upgrade#x",
  ]) {
    assert.equal(isInternalEnvdPath(path), true, path);
  }
  for (const path of [
    "/",
    "/health",
    "/files?path=/init",
    "/initialize",
    "/envs",
    "/process.Process/Start",
  ]) {
    assert.equal(isInternalEnvdPath(path), false, path);
  }
});

test("requestPath: origin form as is, absolute form reduced, anything else refused", () => {
  assert.equal(requestPath("/a/b?c=d"), "/a/b?c=d");
  assert.equal(requestPath("http://49983-abc.example.test/init?x=1"), "/init?x=1");
  assert.equal(requestPath("*"), undefined);
  assert.equal(requestPath("ftp://x/y"), undefined);
  assert.equal(requestPath(""), undefined);
  assert.equal(requestPath(undefined), undefined);
});

test("tokenMatches compares whole tokens", () => {
  assert.equal(tokenMatches("secret", "secret"), true);
  assert.equal(tokenMatches("secre", "secret"), false);
  assert.equal(tokenMatches("secret2", "secret"), false);
  assert.equal(tokenMatches(undefined, "secret"), false);
  assert.equal(tokenMatches("", ""), false);
  assert.equal(tokenMatches("x", undefined), false);
});

test("upstream request headers: hop-by-hop and routing headers go, forwarding headers come", () => {
  const headers = upstreamRequestHeaders(
    // biome-ignore format: name/value pairs
    [
      "Host", "3000-abc.example.test",
      "Connection", "keep-alive, X-Secret-Hop",
      "Keep-Alive", "timeout=5",
      "X-Secret-Hop", "1",
      "Proxy-Authorization", "Basic x",
      "TE", "trailers",
      "Trailer", "x",
      "Transfer-Encoding", "chunked",
      "Upgrade", "websocket",
      "Expect", "100-continue",
      "E2B-Sandbox-Id", "abc",
      "e2b-sandbox-port", "3000",
      "e2b-traffic-access-token", "secret",
      "X-Forwarded-For", "203.0.113.9",
      "Cookie", "a=1",
      "Cookie", "b=2",
      "X-Access-Token", "envd-token",
    ],
    {
      host: "app.internal:3000",
      drop: ROUTING_HEADERS,
      clientAddress: "198.51.100.4",
      proto: "http",
      originalHost: "3000-abc.example.test",
      upgrade: false,
    },
  );
  assert.deepEqual(headers, {
    host: "app.internal:3000",
    cookie: ["a=1", "b=2"],
    "x-access-token": "envd-token",
    "x-forwarded-for": "203.0.113.9, 198.51.100.4",
    "x-forwarded-proto": "http",
    "x-forwarded-host": "3000-abc.example.test",
    "transfer-encoding": "chunked",
  });
});

test("upstream request headers of an upgrade keep Upgrade and say Connection: upgrade", () => {
  const headers = upstreamRequestHeaders(
    ["Host", "h", "Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Key", "k"],
    { host: "h", clientAddress: undefined, proto: "https", originalHost: "h", upgrade: true },
  );
  assert.equal(headers.connection, "upgrade");
  assert.equal(headers.upgrade, "websocket");
  assert.equal(headers["sec-websocket-key"], "k");
  assert.equal(headers["x-forwarded-proto"], "https");
  assert.equal(headers["x-forwarded-for"], undefined);
});

test("a Connection header cannot strip Content-Length", () => {
  const headers = upstreamRequestHeaders(
    ["Host", "h", "Connection", "content-length", "Content-Length", "5"],
    { host: "h", clientAddress: undefined, proto: "http", originalHost: "h", upgrade: false },
  );
  assert.equal(headers["content-length"], "5");
});

test("downstream response headers drop hop-by-hop ones and keep repeats", () => {
  assert.deepEqual(
    // biome-ignore format: name/value pairs
    downstreamResponseHeaders([
      "Content-Type", "text/plain",
      "Connection", "keep-alive, X-Hop",
      "Keep-Alive", "timeout=5",
      "X-Hop", "1",
      "Transfer-Encoding", "chunked",
      "Set-Cookie", "a=1",
      "Set-Cookie", "b=2",
    ]),
    ["Content-Type", "text/plain", "Set-Cookie", "a=1", "Set-Cookie", "b=2"],
  );
});
