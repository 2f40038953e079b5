// The proxy in front of a hostile server in a sandbox (the guest's root user may run anything
// on any port, envd's included): heads trickled or huge, bodies without end, servers that
// never answer. The proxy cuts each at its limits (head time, head size, the client leaving,
// the sandbox stopping), holds a bounded buffer for a client that does not read, and other
// sandboxes' requests are not slowed. The upstream is the hostile stand-in on a loopback
// address of its own; FakeRouter stands in for the orchestrator.
import assert from "node:assert/strict";
import { once } from "node:events";
import { connect } from "node:net";
import { after, describe, it, type TestContext } from "node:test";
import { HostileEnvd, type HostileMode } from "../../helpers/hostile-envd.js";
import { closeAll, frontServer, rawExchange, send, sendStreaming, upstream } from "./harness.js";

after(closeAll);

const SLACK_MS = 1_500;
const HEAD_TIMEOUT_MS = 1_000;
const MAX_HEAD_BYTES = 32 * 1024;

async function proxyTo(t: TestContext, mode: HostileMode, intervalMs?: number) {
  const envd = await HostileEnvd.start({ mode, port: 0, intervalMs });
  t.after(() => envd.close());
  const front = await frontServer({
    headTimeoutMs: HEAD_TIMEOUT_MS,
    maxResponseHeadBytes: MAX_HEAD_BYTES,
  });
  front.router.add("evil", { host: envd.host, ports: { 49983: envd.port, 8080: envd.port } });
  return { envd, ...front };
}

const toEvil = (port = 49983) => ({ "e2b-sandbox-id": "evil", "e2b-sandbox-port": String(port) });

async function timedSend(port: number, headers: Record<string, string>) {
  const started = performance.now();
  const sent = await send(port, { headers });
  return { ...sent, ms: performance.now() - started };
}

describe("the proxy in front of a hostile sandbox server", () => {
  it("a response head trickled one byte a second is cut at the head timeout: 504", async (t) => {
    const { envd, port } = await proxyTo(t, "trickle", 1_000);
    const sent = await timedSend(port, toEvil());
    assert.equal(sent.status, 504);
    assert.match(sent.body, /did not send a whole response head within 1000 ms/);
    assert.ok(sent.ms < HEAD_TIMEOUT_MS + SLACK_MS, `took ${Math.round(sent.ms)} ms`);
    await envd.allClosed();
  });

  for (const mode of ["silent", "stalled"] as const) {
    it(`an app port whose server is ${mode} is cut at the head timeout: 504`, async (t) => {
      const { envd, port } = await proxyTo(t, mode);
      const sent = await timedSend(port, toEvil(8080));
      assert.equal(sent.status, 504);
      assert.ok(sent.ms < HEAD_TIMEOUT_MS + SLACK_MS, `took ${Math.round(sent.ms)} ms`);
      await envd.allClosed();
    });
  }

  it("a response head over the limit is refused at once: 502, no more read", async (t) => {
    const { envd, port } = await proxyTo(t, "huge-headers");
    const sent = await timedSend(port, toEvil());
    assert.equal(sent.status, 502);
    assert.match(sent.body, new RegExp(`response head over ${MAX_HEAD_BYTES} bytes`));
    assert.ok(sent.ms < SLACK_MS);
    await envd.allClosed();
    assert.ok(envd.bytesSent < 16 * 1024 * 1024, `${envd.bytesSent} bytes sent`);
  });

  it("an endless body is cut on the sandbox's side when the client goes away", async (t) => {
    const { envd, port } = await proxyTo(t, "endless");
    const res = await sendStreaming(port, { headers: toEvil() });
    assert.equal(res.statusCode, 200);
    let received = 0;
    for await (const chunk of res) {
      received += (chunk as Buffer).length;
      if (received > 1024 * 1024) break; // leaves: the response is destroyed
    }
    await envd.allClosed();
  });

  it("an endless body to a client that does not read holds a bounded buffer, then idles out", async (t) => {
    const envd = await HostileEnvd.start({ mode: "endless", port: 0 });
    t.after(() => envd.close());
    const { port, router } = await frontServer({ idleTimeoutMs: 1_500 });
    router.add("evil", { host: envd.host, ports: { 49983: envd.port } });
    const client = connect(port, "127.0.0.1");
    t.after(() => client.destroy());
    client.on("error", () => {});
    await once(client, "connect");
    client.write("GET / HTTP/1.1\r\nhost: x\r\ne2b-sandbox-id: evil\r\n\r\n");
    client.pause(); // never reads
    await new Promise((resolve) => setTimeout(resolve, 600));
    const first = envd.bytesSent;
    await new Promise((resolve) => setTimeout(resolve, 300));
    // Backpressure: the sandbox could send only what the buffers between hold.
    assert.equal(envd.bytesSent, first, "the upstream stopped at backpressure");
    assert.ok(first < 64 * 1024 * 1024, `${first} bytes buffered between`);
    // Nothing moves either way: the idle timeout ends the exchange on the sandbox's side.
    await envd.allClosed(1_500 + SLACK_MS);
  });

  it("a body trickled without end is cut at once when the sandbox is killed", async (t) => {
    const { envd, port, router } = await proxyTo(t, "trickle-body", 50);
    const res = await sendStreaming(port, { headers: toEvil() });
    res.on("error", () => {});
    await once(res, "data");
    // once() would reject on the "aborted" error that comes with the cut.
    const closed = new Promise((resolve) => res.once("close", resolve));
    router.stop("evil");
    await closed;
    assert.equal(res.complete, false, "the client never sees a clean end");
    await envd.allClosed();
  });

  it("an upgrade whose answer is trickled is cut at the head timeout: 504 on the socket", async (t) => {
    const { envd, port } = await proxyTo(t, "trickle", 100);
    const started = performance.now();
    const { head } = await rawExchange(
      port,
      "GET /ws HTTP/1.1\r\nhost: x\r\ne2b-sandbox-id: evil\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n",
    );
    assert.match(head, /^HTTP\/1\.1 504 /);
    assert.ok(performance.now() - started < HEAD_TIMEOUT_MS + SLACK_MS);
    await envd.allClosed();
  });

  it("an upgrade answered with a huge head is refused: 502 on the socket", async (t) => {
    const { envd, port } = await proxyTo(t, "huge-headers");
    const { head } = await rawExchange(
      port,
      "GET /ws HTTP/1.1\r\nhost: x\r\ne2b-sandbox-id: evil\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n",
    );
    assert.match(head, /^HTTP\/1\.1 502 /);
    await envd.allClosed();
  });

  it("other sandboxes' proxied requests are unaffected by one flooding its clients", async (t) => {
    const { envd, port, router } = await proxyTo(t, "endless");
    const { port: good } = await upstream((_req, res) => {
      res.writeHead(200, { "content-type": "text/plain" });
      res.end("fine");
    });
    router.add("good", { ports: { 49983: good } });
    // Three clients drain the endless sandbox as fast as they can.
    const floods = await Promise.all(
      [1, 2, 3].map(() => sendStreaming(port, { headers: toEvil() })),
    );
    let flooded = 0;
    for (const res of floods) {
      res.on("data", (chunk: Buffer) => {
        flooded += chunk.length;
      });
      res.on("error", () => {});
    }
    const latencies: number[] = [];
    for (let i = 0; i < 20; i++) {
      const sent = await timedSend(port, { "e2b-sandbox-id": "good" });
      assert.equal(sent.body, "fine");
      latencies.push(sent.ms);
    }
    assert.ok(flooded > 10 * 1024 * 1024, `the floods ran: ${flooded} bytes`);
    const worst = Math.max(...latencies);
    assert.ok(worst < 500, `worst latency ${Math.round(worst)} ms beside the floods`);
    for (const res of floods) res.destroy();
    await envd.allClosed();
  });
});
