import assert from "node:assert/strict";
import type { Socket } from "node:net";
import { after, before, test } from "node:test";
import { createAgent } from "../../../src/agent/server.js";
import { ENVD_PORT } from "../../../src/protocol/index.js";
import {
  closeAll,
  closedPort,
  frontServer,
  listen,
  rawExchange,
  send,
  upstream,
} from "./harness.js";

// Ports bound to the guest's loopback: nothing answers at the sandbox's address, so the proxy
// goes through envd's tunnel (the real agent here, on a port of its own, as the sandbox's
// envd) to the port on 127.0.0.1. The "sandbox" is this host: its loopback servers stand in
// for an agent's dev server; FakeRouter maps the sandbox port to a closed port, as the
// guest's own address would refuse it.

let proxyPort: number;
let loopbackPort: number;
let silentPort: number;
const TOKEN = "envd-token";
let closeAgent = async () => {};

before(async () => {
  const agent = createAgent();
  agent.state.accessToken = TOKEN;
  const envdPort = await listen(agent.server);
  const app = await upstream((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => res.end(`${req.method} ${req.url} ${Buffer.concat(chunks).toString()}`));
  });
  app.server.on("upgrade", (_req, socket: Socket) => {
    socket.write(
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n",
    );
    socket.on("data", (chunk: Buffer) => socket.write(chunk));
    socket.on("end", () => socket.end());
  });
  loopbackPort = app.port;
  silentPort = await closedPort();
  const front = await frontServer({ envdPort });
  proxyPort = front.port;
  const guestAddressRefuses = await closedPort();
  front.router.add("lo", {
    ports: { [loopbackPort]: guestAddressRefuses, [silentPort]: guestAddressRefuses },
    envdAccessToken: TOKEN,
  });
  front.router.add("untrusted", {
    ports: { [loopbackPort]: guestAddressRefuses },
    envdAccessToken: "wrong",
  });
  closeAgent = () => agent.close();
});
after(async () => {
  await closeAll();
  await closeAgent();
});

const host = (port: number, id = "lo") => `${port}-${id}.sbx.test`;

test("a server on the guest's loopback answers through envd, bodies included", async () => {
  const got = await send(proxyPort, { headers: { host: host(loopbackPort) }, path: "/hello?x=1" });
  assert.equal(got.status, 200);
  assert.equal(got.body, "GET /hello?x=1 ");
  const posted = await send(proxyPort, {
    method: "POST",
    path: "/form",
    headers: { host: host(loopbackPort), "content-type": "text/plain" },
    body: "the whole body",
  });
  assert.equal(posted.status, 200);
  assert.equal(
    posted.body,
    "POST /form the whole body",
    "nothing of the body lost to the refused try",
  );
});

test("an upgrade to a loopback server is tunnelled too", async () => {
  const { head, reader, socket } = await rawExchange(
    proxyPort,
    `GET /ws HTTP/1.1\r\nHost: ${host(loopbackPort)}\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n`,
  );
  assert.match(head, /^HTTP\/1\.1 101/);
  socket.write("ping");
  assert.ok(await reader.until((received) => received.toString() === "ping"));
});

test("nothing listening there either is E2B's 'port not open', at once", async () => {
  const started = Date.now();
  const got = await send(proxyPort, { headers: { host: host(silentPort) } });
  assert.equal(got.status, 502);
  assert.deepEqual(JSON.parse(got.body), {
    sandboxId: "lo",
    message: `The sandbox is running but port ${silentPort} is not open`,
    code: 502,
  });
  assert.ok(Date.now() - started < 5_000);
});

test("envd opens the tunnel only with its access token; the proxy refuses the route from outside", async () => {
  const refused = await send(proxyPort, { headers: { host: host(loopbackPort, "untrusted") } });
  assert.equal(refused.status, 502, "a wrong token opens nothing");
  const outside = await send(proxyPort, {
    path: `/_warren/loopback/${loopbackPort}`,
    headers: { host: host(ENVD_PORT) },
  });
  assert.equal(outside.status, 404);
  assert.match(outside.body, /reserved for the orchestrator/);
});
