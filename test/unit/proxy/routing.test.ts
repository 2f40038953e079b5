import assert from "node:assert/strict";
import type { IncomingHttpHeaders, IncomingMessage } from "node:http";
import { after, before, test } from "node:test";
import { ENVD_PORT } from "../../../src/protocol/index.js";
import { SandboxProxy } from "../../../src/proxy/index.js";
import { WarrenError } from "../../../src/shared/index.js";
import type { FakeRouter } from "../../fakes/fake-router.js";
import { closeAll, frontServer, send, upstream } from "./harness.js";

// Routing and refusals through a real front server; each sandbox port is a real HTTP server
// on 127.0.0.1 that echoes what it received, and FakeRouter stands in for the orchestrator.

interface Echo {
  readonly port: string;
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
}

let proxyPort: number;
let router: FakeRouter;
/** Requests each echo server received, by its name. */
const received: Record<string, Echo[]> = { envd: [], app: [] };

async function echoServer(name: "envd" | "app"): Promise<number> {
  const { port } = await upstream((req: IncomingMessage, res) => {
    const echo = { port: name, method: req.method ?? "", url: req.url ?? "", headers: req.headers };
    received[name]?.push(echo);
    res.writeHead(200, { "content-type": "application/json", "x-upstream": name });
    res.end(JSON.stringify(echo));
  });
  return port;
}

before(async () => {
  ({ port: proxyPort, router } = await frontServer());
  const envd = await echoServer("envd");
  const app = await echoServer("app");
  router.add("abc", { ports: { [ENVD_PORT]: envd, 3000: app } });
  router.add("private", {
    ports: { [ENVD_PORT]: envd, 3000: app },
    allowPublicTraffic: false,
    trafficAccessToken: "s3cret-token",
  });
  router.add("masked", {
    ports: { [ENVD_PORT]: envd, 3000: app },
    maskRequestHost: "app.internal:${PORT}",
  });
  router.add("busy", { ports: {}, conflict: "The sandbox is being paused" });
  router.add("closed", { ports: {} });
});
after(closeAll);

function echoOf(body: string): Echo {
  return JSON.parse(body) as Echo;
}

test("Host routing: <port>-<id>.<domain> reaches that port, path and query kept", {
  timeout: 10_000,
}, async () => {
  const res = await send(proxyPort, {
    path: "/files?path=%2Ftmp%2Fa&username=user",
    headers: { host: "49983-abc.example.test" },
  });
  assert.equal(res.status, 200);
  assert.equal(res.headers["x-upstream"], "envd");
  const echo = echoOf(res.body);
  assert.equal(echo.url, "/files?path=%2Ftmp%2Fa&username=user");
  assert.equal(echo.headers.host, "49983-abc.example.test");
  assert.equal(echo.headers["x-forwarded-host"], "49983-abc.example.test");
  assert.equal(echo.headers["x-forwarded-proto"], "http");
  assert.equal(echo.headers["x-forwarded-for"], "127.0.0.1");

  const app = await send(proxyPort, { path: "/", headers: { host: "3000-abc.example.test:80" } });
  assert.equal(app.headers["x-upstream"], "app");
  assert.equal(app.headers["content-security-policy"], undefined, "the sandbox's own origin");
});

test("an answer served on the node's own origin (the dashboard's) runs as no origin at all", {
  timeout: 10_000,
}, async () => {
  const res = await send(proxyPort, {
    path: "/",
    headers: {
      host: `localhost:${proxyPort}`,
      "e2b-sandbox-id": "abc",
      "e2b-sandbox-port": "3000",
    },
  });
  assert.equal(res.headers["x-upstream"], "app");
  assert.equal(res.headers["content-security-policy"], "sandbox");
  assert.equal(res.headers["x-content-type-options"], "nosniff");
});

test("header routing: e2b-sandbox-id and -port on localhost; routing headers not forwarded", {
  timeout: 10_000,
}, async () => {
  const res = await send(proxyPort, {
    method: "POST",
    path: "/process.Process/List",
    headers: {
      host: `localhost:${proxyPort}`,
      "e2b-sandbox-id": "abc",
      "e2b-sandbox-port": "3000",
      "x-access-token": "envd-token",
      "content-type": "application/json",
    },
    body: "{}",
  });
  assert.equal(res.status, 200);
  const echo = echoOf(res.body);
  assert.equal(echo.port, "app");
  assert.equal(echo.method, "POST");
  assert.equal(echo.headers["e2b-sandbox-id"], undefined);
  assert.equal(echo.headers["e2b-sandbox-port"], undefined);
  assert.equal(echo.headers["x-access-token"], "envd-token");
  assert.equal(echo.headers.host, `localhost:${proxyPort}`);

  // No port header: envd.
  const envd = await send(proxyPort, {
    path: "/health",
    headers: { host: "sandbox.example.test", "e2b-sandbox-id": "abc" },
  });
  assert.equal(envd.headers["x-upstream"], "envd");
});

test("the caller's API key and the admin token never reach a sandbox: X-API-Key, X-Admin-Token and Bearer e2b_… are dropped, the app's own credentials kept", {
  timeout: 10_000,
}, async () => {
  const key = "e2b_0123456789abcdef0123456789abcdef01234567";
  const seen = async (port: number, headers: Record<string, string>) => {
    const res = await send(proxyPort, {
      path: "/",
      headers: { host: `${port}-abc.example.test`, ...headers },
    });
    return echoOf(res.body).headers;
  };
  for (const port of [ENVD_PORT, 3000]) {
    const apiKey = await seen(port, { "x-api-key": key });
    assert.equal(apiKey["x-api-key"], undefined, `X-API-Key on port ${port}`);
    const admin = await seen(port, { "x-admin-token": "the-node-admin-token" });
    assert.equal(admin["x-admin-token"], undefined, `X-Admin-Token on port ${port}`);
    const bearer = await seen(port, { authorization: `Bearer ${key}` });
    assert.equal(bearer.authorization, undefined, `Authorization: Bearer e2b_… on port ${port}`);
    const accessToken = await seen(port, { authorization: "bearer sk_e2b_0123456789abcdef" });
    assert.equal(accessToken.authorization, undefined, `an E2B access token on port ${port}`);
  }
  // envd picks its user from Basic auth; an app checks its own bearer tokens.
  const basic = `Basic ${Buffer.from("user:").toString("base64")}`;
  assert.equal((await seen(ENVD_PORT, { authorization: basic })).authorization, basic);
  const jwt = "Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig";
  assert.equal((await seen(3000, { authorization: jwt })).authorization, jwt);
  assert.equal(
    (await seen(3000, { "x-access-token": "envd-token" }))["x-access-token"],
    "envd-token",
  );
});

test("matches(): sandbox requests only", { timeout: 10_000 }, async () => {
  const proxy = new SandboxProxy({ router: () => router, domain: "sbx.example.test" });
  const anyDomain = new SandboxProxy({ router: () => router });
  const req = (headers: IncomingHttpHeaders) => ({ headers }) as IncomingMessage;
  try {
    assert.equal(proxy.matches(req({ host: "49983-abc.sbx.example.test" })), true);
    assert.equal(proxy.matches(req({ host: "localhost:3000", "e2b-sandbox-id": "abc" })), true);
    assert.equal(proxy.matches(req({ host: "api.example.test", "e2b-sandbox-id": "x" })), true);
    assert.equal(proxy.matches(req({ host: "49983-abc.other.test" })), false);
    assert.equal(proxy.matches(req({ host: "localhost:3000" })), false);
    assert.equal(proxy.matches(req({ host: "sbx.example.test" })), false);
    assert.equal(proxy.matches(req({})), false);
    assert.equal(anyDomain.matches(req({ host: "49983-abc.other.test" })), true);
    assert.equal(anyDomain.matches(req({ host: "my-api.example.test" })), false);
  } finally {
    proxy.close();
    anyDomain.close();
  }
  // The front server's API still answers what the proxy does not take.
  const api = await send(proxyPort, { path: "/sandboxes", headers: { host: "localhost" } });
  assert.deepEqual([api.status, api.body], [404, "api"]);
});

test("unknown sandbox: 502 with E2B's exact body", { timeout: 10_000 }, async () => {
  const res = await send(proxyPort, {
    path: "/health",
    headers: { host: "49983-nope.example.test" },
  });
  assert.equal(res.status, 502);
  assert.match(res.headers["content-type"] ?? "", /^application\/json/);
  assert.equal(res.body, '{"sandboxId":"nope","message":"The sandbox was not found","code":502}');
});

test("sandbox mid-transition: 409 with the router's message", { timeout: 10_000 }, async () => {
  const res = await send(proxyPort, {
    path: "/health",
    headers: { host: "49983-busy.example.test" },
  });
  assert.equal(res.status, 409);
  assert.deepEqual(JSON.parse(res.body), {
    sandboxId: "busy",
    message: "The sandbox is being paused",
    code: 409,
  });
});

test("bad targets: 400 JSON", { timeout: 10_000 }, async () => {
  const cases: Array<Record<string, string>> = [
    { host: "0-abc.example.test" },
    { host: "70000-abc.example.test" },
    { host: "localhost", "e2b-sandbox-id": "ABC" },
    { host: "localhost", "e2b-sandbox-id": "abc", "e2b-sandbox-port": "http" },
  ];
  for (const headers of cases) {
    const res = await send(proxyPort, { path: "/health", headers });
    assert.equal(res.status, 400, JSON.stringify(headers));
    const body = JSON.parse(res.body) as { code: number; message: string };
    assert.equal(body.code, 400);
    assert.ok(body.message.length > 0);
  }
});

test("envd's internal paths are refused with 404 and never forwarded (nor routed)", {
  timeout: 10_000,
}, async () => {
  const before = received.envd?.length ?? 0;
  const routedBefore = router.routed.length;
  for (const path of ["/init", "/init?x=1", "/freeze", "/%69nit", "//init", "/a/../upgrade"]) {
    const res = await send(proxyPort, {
      method: "POST",
      path,
      headers: { host: "49983-abc.example.test", "content-type": "application/json" },
      body: "{}",
    });
    assert.equal(res.status, 404, path);
    const body = JSON.parse(res.body) as { sandboxId: string; code: number; message: string };
    assert.equal(body.sandboxId, "abc");
    assert.equal(body.code, 404);
  }
  assert.equal(received.envd?.length, before);
  assert.equal(router.routed.length, routedBefore);
  // The same paths on an app port are the app's business.
  const app = await send(proxyPort, { path: "/init", headers: { host: "3000-abc.example.test" } });
  assert.equal(app.status, 200);
});

test("traffic access token: required on app ports of private sandboxes, not on envd", {
  timeout: 10_000,
}, async () => {
  const host = "3000-private.example.test";
  const missing = await send(proxyPort, { headers: { host } });
  assert.equal(missing.status, 403);
  assert.deepEqual(JSON.parse(missing.body), {
    sandboxId: "private",
    message: "Missing e2b-traffic-access-token header",
    code: 403,
  });
  const wrong = await send(proxyPort, {
    headers: { host, "e2b-traffic-access-token": "s3cret-tokeN" },
  });
  assert.equal(wrong.status, 403);
  const right = await send(proxyPort, {
    headers: { host, "e2b-traffic-access-token": "s3cret-token" },
  });
  assert.equal(right.status, 200);
  assert.equal(echoOf(right.body).headers["e2b-traffic-access-token"], undefined);

  const envd = await send(proxyPort, {
    path: "/health",
    headers: { host: "49983-private.example.test" },
  });
  assert.equal(envd.status, 200);
  assert.equal(envd.headers["x-upstream"], "envd");
  // A public sandbox needs none.
  const open = await send(proxyPort, { headers: { host: "3000-abc.example.test" } });
  assert.equal(open.status, 200);
});

test("maskRequestHost replaces the Host on app ports, with its port placeholder substituted", {
  timeout: 10_000,
}, async () => {
  const app = await send(proxyPort, { headers: { host: "3000-masked.example.test" } });
  const echo = echoOf(app.body);
  assert.equal(echo.headers.host, "app.internal:3000");
  assert.equal(echo.headers["x-forwarded-host"], "3000-masked.example.test");
  const envd = await send(proxyPort, { headers: { host: "49983-masked.example.test" } });
  assert.equal(echoOf(envd.body).headers.host, "49983-masked.example.test");
});

test("port not open: 502 saying so", { timeout: 10_000 }, async () => {
  const res = await send(proxyPort, { path: "/", headers: { host: "8080-closed.example.test" } });
  assert.equal(res.status, 502);
  assert.equal(
    res.body,
    '{"sandboxId":"closed","message":"The sandbox is running but port 8080 is not open","code":502}',
  );
});

test("a router that throws: its WarrenError status, the proxy survives", {
  timeout: 10_000,
}, async () => {
  const { port, router: failing } = await frontServer();
  failing.route = async () => {
    throw new WarrenError("unavailable", "the node is starting");
  };
  const res = await send(port, { headers: { host: "49983-abc.example.test" } });
  assert.equal(res.status, 503);
  assert.deepEqual(JSON.parse(res.body), {
    sandboxId: "abc",
    message: "the node is starting",
    code: 503,
  });
  failing.route = async () => {
    throw new Error("bug");
  };
  const bug = await send(port, { headers: { host: "49983-abc.example.test" } });
  assert.equal(bug.status, 500);
});

test("close(): later requests get 503", { timeout: 10_000 }, async () => {
  const { port, proxy } = await frontServer();
  proxy.close();
  const res = await send(port, { headers: { host: "49983-abc.example.test" } });
  assert.equal(res.status, 503);
});

test("a pooled connection the sandbox dropped: body-less requests retried once, others 502", {
  timeout: 10_000,
}, async () => {
  // The second request on any connection finds it closed without an answer, as when the
  // sandbox drops an idle keep-alive connection just as the proxy reuses it.
  const served = new WeakMap<object, number>();
  const { port: dropping } = await upstream((req, res) => {
    const count = (served.get(req.socket) ?? 0) + 1;
    served.set(req.socket, count);
    if (count > 1) {
      req.socket.destroy();
      return;
    }
    req.resume();
    req.on("end", () => res.end(`served ${req.method} ${req.url}`));
  });
  router.add("dropping", { ports: { 3000: dropping } });
  const host = "3000-dropping.example.test";
  assert.equal((await send(proxyPort, { path: "/a", headers: { host } })).body, "served GET /a");
  const retried = await send(proxyPort, { path: "/b", headers: { host } });
  assert.deepEqual([retried.status, retried.body], [200, "served GET /b"]);
  const post = await send(proxyPort, { method: "POST", path: "/c", headers: { host }, body: "x" });
  assert.equal(post.status, 502);
  assert.match(
    (JSON.parse(post.body) as { message: string }).message,
    /^The sandbox's server on port 3000 closed the connection without answering/,
  );
});
