import assert from "node:assert/strict";
import { it } from "node:test";
import { connectionNamesRouting, relayRequestHeaders, relayResponseHeaders } from "./headers.js";

// The proxy's own cases (hop-by-hop, routing headers, repeats) are in
// test/unit/proxy/target.test.ts; these are the options either caller picks.

const forwarding = { clientAddress: "198.51.100.4", proto: "http", originalHost: "h" };

it("keeps the client's Host and every other end-to-end header unless told", () => {
  const headers = relayRequestHeaders(
    // biome-ignore format: name/value pairs
    [
      "Host", "3000-abc.example.test",
      "E2B-Sandbox-Id", "abc",
      "Proxy-Authorization", "Basic x",
      "Proxy-Connection", "keep-alive",
      "Expect", "100-continue",
      "Connection", "close, X-Hop",
      "X-Hop", "1",
    ],
    { ...forwarding, upgrade: false },
  );
  assert.deepEqual(headers, {
    host: "3000-abc.example.test",
    "e2b-sandbox-id": "abc",
    "x-forwarded-for": "198.51.100.4",
    "x-forwarded-proto": "http",
    "x-forwarded-host": "h",
  });
});

it("never lets Connection strip Host, E2b-Sandbox-* or the body's length (the next hop routes by them)", () => {
  // biome-ignore format: name/value pairs
  const raw = [
    "Host", "49983-abc.example.test",
    "E2B-Sandbox-Id", "abc",
    "E2B-Sandbox-Port", "49983",
    "Content-Length", "2",
    "Connection", "host, E2B-Sandbox-Id,e2b-sandbox-port , content-length, x-hop",
    "X-Hop", "1",
  ];
  const headers = relayRequestHeaders(raw, { ...forwarding, upgrade: false });
  assert.equal(headers.host, "49983-abc.example.test");
  assert.equal(headers["e2b-sandbox-id"], "abc");
  assert.equal(headers["e2b-sandbox-port"], "49983");
  assert.equal(headers["content-length"], "2");
  assert.equal(headers["x-hop"], undefined);
  assert.deepEqual(connectionNamesRouting(raw), ["host", "e2b-sandbox-id", "e2b-sandbox-port"]);
  assert.deepEqual(connectionNamesRouting(["Connection", "keep-alive, content-length"]), []);
});

it("replaces Host and drops the names it is given", () => {
  const headers = relayRequestHeaders(["Host", "h", "E2B-Sandbox-Id", "abc", "X-A", "1"], {
    ...forwarding,
    host: "10.0.0.2:3000",
    drop: new Set(["e2b-sandbox-id"]),
    upgrade: false,
  });
  assert.equal(headers.host, "10.0.0.2:3000");
  assert.equal(headers["e2b-sandbox-id"], undefined);
  assert.equal(headers["x-a"], "1");
});

it("drops every proxy-* response header", () => {
  assert.deepEqual(
    relayResponseHeaders(["Proxy-Agent", "x", "Proxy-Authenticate", "y", "X-A", "1"]),
    ["X-A", "1"],
  );
});
