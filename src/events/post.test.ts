// One delivery attempt against receivers on loopback: refused as a non-public address unless
// the operator listed the host; a listed one's status read, its body never waited for; a
// receiver that does not answer ends within the bound.
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, it } from "node:test";
import { postWebhook } from "./post.js";

const received: { headers: Record<string, unknown>; body: string }[] = [];
let answer = 204;
const server: Server = createServer((req, res) => {
  let body = "";
  req.on("data", (chunk) => {
    body += chunk;
  });
  req.on("end", () => {
    received.push({ headers: req.headers, body });
    if (req.url === "/silent") return; // never answers
    res.writeHead(answer);
    res.flushHeaders();
    // A body the client has no reason to read, and never finished.
    if (answer !== 204) res.write("x".repeat(1024));
  });
});
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
const { port } = server.address() as AddressInfo;
after(() => {
  server.closeAllConnections();
  server.close();
});

const request = (path: string, privateHosts: string[] = [`127.0.0.1:${port}`]) => ({
  url: `http://127.0.0.1:${port}${path}`,
  headers: { "e2b-signature": "sig" },
  body: '{"a":1}',
  timeoutMs: 1_000,
  privateHosts,
});

it("posts to a listed private host and reads only the status", async () => {
  answer = 204;
  assert.deepEqual(await postWebhook(request("/hook")), { status: 204 });
  const last = received.at(-1);
  assert.equal(last?.body, '{"a":1}');
  assert.equal(last?.headers["e2b-signature"], "sig");
  assert.equal(last?.headers["content-type"], "application/json");
  answer = 500;
  assert.deepEqual(await postWebhook(request("/hook")), { status: 500 });
});

it("refuses a non-public address the operator did not list, sending nothing", async () => {
  const before = received.length;
  const refused = await postWebhook(request("/hook", []));
  assert.match("error" in refused ? refused.error : "", /127\.0\.0\.1 is a loopback address/);
  const byName = await postWebhook({ ...request("/hook", []), url: `http://localhost:${port}/` });
  assert.match("error" in byName ? byName.error : "", /resolves to .*loopback address/);
  assert.equal(received.length, before);
});

it("ends a silent receiver's attempt at its bound", async () => {
  const started = Date.now();
  const result = await postWebhook(request("/silent"));
  assert.ok("error" in result, JSON.stringify(result));
  assert.ok(Date.now() - started < 3_000);
});
