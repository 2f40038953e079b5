import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { once } from "node:events";
import { type IncomingMessage, request } from "node:http";
import { after, before, test } from "node:test";
import { ENVD_PORT } from "../../../src/protocol/index.js";
import { closeAll, deferred, frontServer, sendStreaming, upstream, within } from "./harness.js";

// Bodies stream both ways without buffering. The upstream is a real HTTP server on
// 127.0.0.1 standing in for the sandbox's envd; FakeRouter stands in for the orchestrator.

let proxyPort: number;
const host = "49983-stream.example.test";

/** What the upload route received: byte count, sha256, transfer-encoding. */
let lastUpload: { bytes: number; sha256: string; te: string | undefined } | undefined;
/** Resolved by the upstream when the first piece of a streamed upload arrived. */
let uploadStarted = deferred();
/** The test resolves these while the upstream's server-streaming response waits on them. */
let clientGotEvent: Array<ReturnType<typeof deferred>> = [];
/** Set by the upstream when its streaming response's last event is written. */
let lastWrittenAt = 0;
/** Resolved when the upstream sees its streaming request closed (client went away). */
let upstreamClosed = deferred();

before(async () => {
  const { port: envd } = await upstream((req, res) => {
    if (req.url === "/upload") {
      const hash = createHash("sha256");
      let bytes = 0;
      req.on("data", (chunk: Buffer) => {
        if (bytes === 0) uploadStarted.resolve();
        bytes += chunk.length;
        hash.update(chunk);
      });
      req.on("end", () => {
        lastUpload = { bytes, sha256: hash.digest("hex"), te: req.headers["transfer-encoding"] };
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify(lastUpload));
      });
      return;
    }
    if (req.url === "/events") {
      // Server-streaming: each event waits until the client saw the previous one (or 3 s).
      res.writeHead(200, { "content-type": "text/event-stream" });
      void (async () => {
        for (let i = 0; i < clientGotEvent.length; i++) {
          res.write(`data: ${i}\n\n`);
          await within(clientGotEvent[i]?.promise ?? Promise.resolve(), 3_000);
        }
        lastWrittenAt = performance.now();
        res.end("data: end\n\n");
      })();
      return;
    }
    if (req.url === "/forever") {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write("data: first\n\n");
      res.on("close", () => upstreamClosed.resolve());
      return;
    }
    res.writeHead(404);
    res.end();
  });
  const front = await frontServer();
  proxyPort = front.port;
  front.router.add("stream", { ports: { [ENVD_PORT]: envd } });
});
after(closeAll);

test("a 5 MB request body arrives exactly", { timeout: 10_000 }, async () => {
  const body = randomBytes(5 * 1024 * 1024);
  const res = await sendStreaming(proxyPort, {
    method: "POST",
    path: "/upload",
    headers: { host, "content-type": "application/octet-stream" },
    body,
  });
  assert.equal(res.statusCode, 200);
  res.resume();
  await once(res, "end");
  assert.equal(lastUpload?.bytes, body.length);
  assert.equal(lastUpload?.sha256, createHash("sha256").update(body).digest("hex"));
});

test("a chunked upload streams up before the client finished it, still chunked", {
  timeout: 10_000,
}, async () => {
  uploadStarted = deferred();
  const req = request({
    host: "127.0.0.1",
    port: proxyPort,
    method: "POST",
    path: "/upload",
    headers: { host, "transfer-encoding": "chunked" },
    agent: false,
  });
  const response = once(req, "response");
  req.write("first piece;");
  req.flushHeaders();
  assert.equal(await within(uploadStarted.promise, 3_000), true, "upstream saw the first piece");
  req.end("second piece");
  const [res] = (await response) as [IncomingMessage];
  res.resume();
  await once(res, "end");
  assert.equal(lastUpload?.bytes, "first piece;second piece".length);
  assert.equal(lastUpload?.te, "chunked");
});

test("a server-streaming response flows event by event, chunked", { timeout: 10_000 }, async () => {
  clientGotEvent = [deferred(), deferred(), deferred()];
  lastWrittenAt = 0;
  const res = await sendStreaming(proxyPort, { path: "/events", headers: { host } });
  assert.equal(res.statusCode, 200);
  assert.equal(res.headers["transfer-encoding"], "chunked");
  assert.equal(res.headers["content-type"], "text/event-stream");
  let received = "";
  const seenBeforeLast: boolean[] = [];
  for await (const chunk of res) {
    received += (chunk as Buffer).toString();
    for (let i = 0; i < clientGotEvent.length; i++) {
      if (received.includes(`data: ${i}\n\n`) && seenBeforeLast[i] === undefined) {
        seenBeforeLast[i] = lastWrittenAt === 0;
        clientGotEvent[i]?.resolve();
      }
    }
  }
  assert.equal(received, "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: end\n\n");
  assert.deepEqual(seenBeforeLast, [true, true, true]);
});

test("the client going away aborts the upstream request", { timeout: 10_000 }, async () => {
  upstreamClosed = deferred();
  const res = await sendStreaming(proxyPort, { path: "/forever", headers: { host } });
  const [first] = (await once(res, "data")) as [Buffer];
  assert.equal(first.toString(), "data: first\n\n");
  res.destroy();
  assert.equal(await within(upstreamClosed.promise, 3_000), true, "upstream request closed");
});
