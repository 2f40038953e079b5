import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders, request } from "node:http";
import { type AddressInfo, connect } from "node:net";
import { describe, it } from "node:test";
import { WarrenError } from "../../../src/shared/index.js";
import { TEST_ADMIN_TOKEN } from "../../helpers/auth.js";
import { API_KEY, type TestCluster, useTestClusters } from "../../helpers/gateway-cluster.js";

const asAdmin = { apiKey: null, headers: { "x-admin-token": TEST_ADMIN_TOKEN } };

// The gateway over stand-in nodes (the real node API on the in-memory sandbox service) and
// an in-memory cluster catalog: placement, routing, merging, admission, node failures.

const cluster = useTestClusters();

async function create(c: TestCluster, templateID = "base"): Promise<Response> {
  return c.call("POST", "/sandboxes", { body: { templateID, timeout: 300 } });
}

async function createdId(c: TestCluster): Promise<string> {
  const res = await create(c);
  assert.equal(res.status, 201, await res.clone().text());
  return ((await res.json()) as { sandboxID: string }).sandboxID;
}

function holder(c: TestCluster, sandboxId: string): string | undefined {
  return c.nodes.find((node) => node.service.sandboxes.has(sandboxId))?.id;
}

/**
 * Every node of `c` refuses creates as busy starting VMs (`reason`: at once, or after holding
 * them), node i with a Retry-After of 7 + i s.
 */
function allBusyStarting(
  c: TestCluster,
  reason: "start_queue_full" | "start_queue_timeout" = "start_queue_full",
): void {
  for (const [node, seconds] of c.nodes.map((n, i) => [n, 7 + i] as const)) {
    node.service.failures.set(
      "create",
      new WarrenError(reason, "node busy starting VMs", { retryAfterS: seconds }),
    );
  }
}

/** How many creates the nodes of `c` were asked for. */
function createsAsked(c: TestCluster): number {
  return c.nodes.reduce((n, node) => n + node.service.callsOf("create").length, 0);
}

describe("gateway: placement", () => {
  it("spreads creates over the nodes with room", async () => {
    const c = await cluster({ nodes: 3 });
    const ids = [];
    for (let i = 0; i < 9; i++) ids.push(await createdId(c));
    const perNode = c.nodes.map((node) => node.service.sandboxes.size);
    // Reservations spread a burst between heartbeats: every node got some.
    assert.ok(
      perNode.every((n) => n >= 1),
      `creates per node: ${perNode.join(", ")}`,
    );
    assert.equal(
      perNode.reduce((a, b) => a + b),
      9,
    );
  });

  it("prefers a node with a warm VMM of the template", async () => {
    const c = await cluster({ nodes: 3 });
    const warm = { sandboxes: 0, vcpusUsed: 0, memoryMiBUsed: 0, draining: false };
    await c.cluster.heartbeat("node0", { ...warm, warmTemplates: [] });
    await c.cluster.heartbeat("node1", { ...warm, warmTemplates: ["base"] });
    await c.cluster.heartbeat("node2", { ...warm, warmTemplates: [] });
    await c.gateway.directory.refresh();
    assert.equal(holder(c, await createdId(c)), "node1");
  });

  it("tries the next node when one refuses for room, and 429s with Retry-After when all do", async () => {
    const c = await cluster({ nodes: 2, maxSandboxes: 1, gateway: { queueWaitMs: 300 } });
    const a = await createdId(c);
    const b = await createdId(c);
    assert.notEqual(holder(c, a), holder(c, b), "the second create went to the other node");
    const started = Date.now();
    const res = await create(c);
    assert.equal(res.status, 429);
    assert.equal(res.headers.get("retry-after"), "1");
    const body = (await res.json()) as { code: number; reason: string; message: string };
    assert.equal(body.code, 429);
    assert.equal(body.reason, "cluster_full");
    assert.match(body.message, /no node has room/);
    assert.ok(Date.now() - started >= 250, "it waited in the queue for room first");
  });

  it("nodes all busy starting VMs: 429 at once, with the soonest Retry-After they gave", async () => {
    const c = await cluster({ nodes: 2, gateway: { queueWaitMs: 5000 } });
    allBusyStarting(c);
    const started = Date.now();
    const res = await create(c);
    assert.equal(res.status, 429);
    assert.ok(Date.now() - started < 2000, "not held in the gateway's queue for room");
    assert.equal(res.headers.get("retry-after"), "7");
    const body = (await res.json()) as { reason: string; message: string };
    assert.equal(body.reason, "cluster_full");
    assert.match(body.message, /node0: start_queue_full/);
    assert.match(body.message, /node1: start_queue_full/);
  });

  it("a node that said it is busy starting VMs is taken at its word for a second, not asked again", async () => {
    const c = await cluster({ nodes: 2, gateway: { queueWaitMs: 5000 } });
    allBusyStarting(c);
    const asked = () => createsAsked(c);
    assert.equal((await create(c)).status, 429);
    assert.equal(asked(), 2);
    const started = Date.now();
    const again = await create(c);
    assert.equal(again.status, 429);
    assert.ok(Date.now() - started < 500, "refused by the gateway itself");
    assert.equal(again.headers.get("retry-after"), "7");
    assert.match(((await again.json()) as { message: string }).message, /node1: start_queue_full/);
    assert.equal(asked(), 2, "no node was asked again");
    for (const node of c.nodes) node.service.failures.delete("create");
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    assert.equal((await create(c)).status, 201, "a second later, nodes are asked again");
  });

  it("a create a node held and then shed is refused, not tried on the next node", async () => {
    const c = await cluster({ nodes: 3, gateway: { queueWaitMs: 5000 } });
    allBusyStarting(c, "start_queue_timeout");
    const started = Date.now();
    const res = await create(c);
    assert.equal(res.status, 429);
    assert.ok(Date.now() - started < 2000, "not held in the gateway's queue for room");
    const body = (await res.json()) as { reason: string; message: string };
    assert.equal(body.reason, "cluster_full");
    assert.match(body.message, /node\d: start_queue_timeout/);
    assert.equal(createsAsked(c), 1, "one node's wait, not every node's");
  });

  it("a queued create takes the room a kill frees", async () => {
    const c = await cluster({ nodes: 1, maxSandboxes: 1, gateway: { queueWaitMs: 5000 } });
    const first = await createdId(c);
    const queued = create(c);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const killed = await c.call("DELETE", `/sandboxes/${first}`);
    assert.equal(killed.status, 204);
    assert.equal((await queued).status, 201);
  });

  it("refuses at once when the queue is full", async () => {
    const c = await cluster({
      nodes: 1,
      maxSandboxes: 1,
      gateway: { queueWaitMs: 2000, maxQueued: 1 },
    });
    await createdId(c);
    const waiting = create(c);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const started = Date.now();
    const refused = await create(c);
    assert.equal(refused.status, 429);
    assert.ok(Date.now() - started < 1500, "the second waiter was not queued");
    assert.equal((await waiting).status, 429);
  });

  it("avoids draining and down nodes; no node up is a 503", async () => {
    const c = await cluster({ nodes: 2 });
    const drained = await c.call("POST", "/nodes/node0/drain", asAdmin);
    assert.equal(drained.status, 204);
    for (let i = 0; i < 3; i++) assert.equal(holder(c, await createdId(c)), "node1");
    await c.cluster.setNodeState("node1", "down");
    await c.gateway.directory.refresh();
    const res = await create(c);
    assert.equal(res.status, 503);
    assert.equal(((await res.json()) as { reason: string }).reason, "no_nodes");
    const nodes = (await (await c.call("GET", "/nodes", asAdmin)).json()) as {
      nodeID: string;
      state: string;
    }[];
    assert.deepEqual(
      nodes.map((n) => [n.nodeID, n.state]),
      [
        ["node0", "draining"],
        ["node1", "down"],
      ],
    );
  });

  it("a node silent past downAfterMs is marked down and avoided", async () => {
    const c = await cluster({ nodes: 2, gateway: { downAfterMs: 300 } });
    c.cluster.age("node0", 10_000);
    await c.gateway.directory.refresh();
    assert.equal(c.cluster.nodes.get("node0")?.state, "down");
    assert.equal(holder(c, await createdId(c)), "node1");
  });
});

describe("gateway: routing", () => {
  it("relays every call about a sandbox to its node", async () => {
    const c = await cluster({ nodes: 3 });
    const ids = [await createdId(c), await createdId(c), await createdId(c)];
    for (const id of ids) {
      const res = await c.call("GET", `/sandboxes/${id}`);
      assert.equal(res.status, 200);
      assert.equal(((await res.json()) as { sandboxID: string }).sandboxID, id);
      assert.equal((await c.call("POST", `/sandboxes/${id}/pause`)).status, 204);
      const node = c.nodes.find((n) => n.id === holder(c, id));
      assert.equal(node?.service.sandboxes.get(id)?.state, "paused");
      assert.equal(
        (await c.call("POST", `/sandboxes/${id}/connect`, { body: { timeout: 60 } })).status,
        201,
      );
    }
  });

  it("answers E2B's 404 for unknown sandboxes and lost ones", async () => {
    const c = await cluster({ nodes: 1 });
    const unknown = await c.call("GET", "/sandboxes/nosuchsandbox");
    assert.equal(unknown.status, 404);
    assert.equal(((await unknown.json()) as { reason: string }).reason, "sandbox_not_found");
    const id = await createdId(c);
    // As a gateway marking its node down leaves it.
    await c.cluster
      .catalog(holder(c, id) ?? "")
      .updateSandbox(id, { state: "killed", endedReason: "lost" });
    const lost = await c.call("GET", `/sandboxes/${id}`);
    assert.equal(lost.status, 404);
    const body = (await lost.json()) as { code: number; reason: string; message: string };
    assert.equal(body.code, 404);
    assert.equal(body.reason, "sandbox_lost");
    const proxied = await fetch(`${c.gateway.url}/`, { headers: { "e2b-sandbox-id": id } });
    assert.equal(proxied.status, 502);
    assert.deepEqual(await proxied.json(), {
      sandboxId: id,
      message: "The sandbox was not found",
      code: 502,
    });
  });

  it("a node that does not answer is a 503 node_unreachable", async () => {
    const c = await cluster({ nodes: 2 });
    const id = await createdId(c);
    const node = c.nodes.find((n) => n.id === holder(c, id));
    await node?.stop();
    const res = await c.call("GET", `/sandboxes/${id}`);
    assert.equal(res.status, 503);
    assert.equal(res.headers.get("retry-after"), "5");
    assert.equal(((await res.json()) as { reason: string }).reason, "node_unreachable");
  });

  it("moves a paused sandbox off a down or draining node on resume, not on other calls", async () => {
    const c = await cluster({ nodes: 3 });
    const id = await createdId(c);
    const from = c.nodes.find((n) => n.id === holder(c, id));
    assert.ok(from);
    assert.equal((await c.call("POST", `/sandboxes/${id}/pause`)).status, 204);
    await c.cluster.setNodeState(from.id, "down");
    assert.equal((await c.call("GET", `/sandboxes/${id}`)).status, 503, "not moved by a get");
    assert.equal((await c.cluster.locateSandbox(id))?.nodeId, from.id);
    // Unpublished (its snapshot is not in the shared store): it stays.
    assert.equal((await c.call("POST", `/sandboxes/${id}/connect`, { body: {} })).status, 503);

    await c.publishPause(id);
    const connected = await c.call("POST", `/sandboxes/${id}/connect`, { body: { timeout: 60 } });
    const target = (await c.cluster.locateSandbox(id))?.nodeId;
    assert.ok(target && target !== from.id, `claimed for ${target}`);
    // The stand-in target never had it: its 404 shows the call went there.
    assert.equal(connected.status, 404);
    const moved = c.nodes.find((n) => n.id === target);
    // (the node's ownership check asks for it, and finds nothing)
    assert.deepEqual(
      moved?.service.callsOf("get").map((args) => args[0]),
      [id],
    );
    assert.equal(from.service.callsOf("connect").length, 0);
    assert.deepEqual(moved?.service.callsOf("adopt"), [[id]], "taken in before the connect");
    assert.deepEqual(from.service.callsOf("adopt"), []);

    // A draining node, still up, gives its paused sandboxes away the same way.
    await c.cluster.setNodeState(from.id, "up");
    await c.gateway.directory.refresh();
    const other = await createdId(c);
    const holding = c.nodes.find((n) => n.id === holder(c, other));
    assert.ok(holding);
    assert.equal((await c.call("POST", `/sandboxes/${other}/pause`)).status, 204);
    await c.publishPause(other);
    await c.cluster.setNodeState(holding.id, "draining");
    await c.call("POST", `/sandboxes/${other}/resume`, { body: {} });
    const drainedTo = (await c.cluster.locateSandbox(other))?.nodeId;
    assert.ok(drainedTo && drainedTo !== holding.id, `claimed for ${drainedTo}`);
  });

  it("drain and undrain reach the node at once, over the gateway's own connection, not the client's key", async () => {
    const c = await cluster({ nodes: 2 });
    const [node] = c.nodes;
    assert.ok(node);
    // A team's key is no admin: it cannot drain the cluster's nodes (it could, before teams).
    const byTeam = await c.call("POST", `/nodes/${node.id}/drain`);
    assert.equal(byTeam.status, 403);
    assert.equal(((await byTeam.json()) as { reason?: string }).reason, "admin_required");
    assert.equal((await c.call("POST", `/nodes/${node.id}/drain`, asAdmin)).status, 204);
    assert.equal(c.cluster.nodes.get(node.id)?.state, "draining");
    assert.equal((await c.call("POST", `/nodes/${node.id}/undrain`, asAdmin)).status, 204);
    assert.equal(c.cluster.nodes.get(node.id)?.state, "up");
    const told = node.service.calls.map((call) => call.method);
    assert.deepEqual(
      told.filter((m) => m === "drain" || m === "undrain"),
      ["drain", "undrain"],
    );
    // The node's internal API takes no API key: a client cannot call it through the gateway.
    const direct = await fetch(`${node.plainUrl}/internal/node/drain`, {
      method: "POST",
      headers: { "x-api-key": API_KEY },
    });
    assert.equal(direct.status, 403);
    const viaGateway = await c.call("POST", "/internal/node/drain");
    assert.equal(viaGateway.status, 404);
  });

  it("relays sandbox traffic by header and by Host, streaming, and upgrades", async () => {
    const c = await cluster({ nodes: 2 });
    const id = await createdId(c);
    const node = holder(c, id);
    const byHeader = await fetch(`${c.gateway.url}/files?path=/x`, {
      method: "POST",
      headers: { "e2b-sandbox-id": id, "e2b-sandbox-port": "49983" },
      body: "payload",
    });
    const echoed = (await byHeader.json()) as Record<string, unknown>;
    assert.equal(echoed.node, node);
    assert.equal(echoed.body, "payload");
    assert.equal(echoed.sandboxId, id, "routing headers reach the node");
    // fetch() sets Host itself: a plain request names another.
    const byHost = await new Promise<string>((resolve, reject) => {
      request(`${c.gateway.url}/hello`, { headers: { host: `3000-${id}.localhost` } }, (res) => {
        let text = "";
        res.on("data", (chunk) => {
          text += chunk;
        });
        res.on("end", () => resolve(text));
      })
        .on("error", reject)
        .end();
    });
    assert.equal((JSON.parse(byHost) as Record<string, unknown>).host, `3000-${id}.localhost`);

    // Chunks arrive as the node sends them, not all at the end.
    const stream = await fetch(`${c.gateway.url}/stream`, { headers: { "e2b-sandbox-id": id } });
    const reader = stream.body?.getReader();
    assert.ok(reader);
    const started = Date.now();
    const first = await reader.read();
    assert.match(new TextDecoder().decode(first.value), /^chunk 0/);
    assert.ok(Date.now() - started < 350, "the first chunk came before the last was sent");
    while (!(await reader.read()).done) {}

    const invalid = await raw(c.gateway.url, { path: "/", headers: { "e2b-sandbox-id": "N0!" } });
    assert.equal(invalid.status, 400);
    assert.equal(invalid.headers["access-control-allow-origin"], "*");
    assert.equal((JSON.parse(invalid.body) as { code: number }).code, 400);

    const gateway = new URL(c.gateway.url);
    const socket = connect(Number(gateway.port), gateway.hostname);
    socket.write(
      `GET /ws HTTP/1.1\r\nhost: 49983-${id}.localhost\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\nping`,
    );
    let received = "";
    for await (const chunk of socket) {
      received += String(chunk);
      if (received.includes("ping")) break;
    }
    socket.destroy();
    assert.match(received, /^HTTP\/1.1 101/);
    assert.match(received, /ping$/);
  });

  it("needs the API key for the API, not for sandbox traffic", async () => {
    const c = await cluster({ nodes: 1 });
    const res = await c.call("GET", "/v2/sandboxes", { apiKey: null });
    assert.equal(res.status, 401);
    assert.equal(((await res.json()) as { code: number }).code, 401);
    assert.equal((await c.call("POST", "/sandboxes", { apiKey: "wrong", body: {} })).status, 401);
    assert.equal((await c.call("GET", "/nodes", { apiKey: null })).status, 401);
    const id = await createdId(c);
    const traffic = await fetch(`${c.gateway.url}/`, { headers: { "e2b-sandbox-id": id } });
    assert.equal(traffic.status, 200);
  });

  it("relays volumes to a node: /volumes with the API key, their content with none of its own", async () => {
    const c = await cluster({ nodes: 1 });
    assert.equal((await c.call("GET", "/volumes", { apiKey: null })).status, 401);
    // The stand-in nodes serve no volumes: their 503 shows the call reached one.
    const listed = await c.call("GET", "/volumes");
    assert.equal(listed.status, 503);
    assert.match(((await listed.json()) as { message: string }).message, /volumes/);
    const content = await c.call("GET", "/volumecontent/x/dir?path=/", { apiKey: null });
    assert.equal(content.status, 503, "the node, not the gateway, checks the volume's token");
  });

  it("relays secrets to a node, with the API key", async () => {
    const c = await cluster({ nodes: 1 });
    assert.equal((await c.call("GET", "/secrets", { apiKey: null })).status, 401);
    // The stand-in nodes serve no secrets: their 503 shows the call reached one.
    const listed = await c.call("POST", "/secrets/sec_x", { body: { value: "v" } });
    assert.equal(listed.status, 503);
    assert.match(((await listed.json()) as { message: string }).message, /secrets/);
  });

  it("tells strangers its /health status only; how many nodes are up is the admin's", async () => {
    const c = await cluster({ nodes: 2 });
    for (const apiKey of [null, "wrong", API_KEY]) {
      const res = await c.call("GET", "/health", { apiKey });
      assert.equal(res.status, 200);
      assert.deepEqual(await res.json(), { status: "ok", role: "gateway" }, `key: ${apiKey}`);
    }
    const res = await c.call("GET", "/health", asAdmin);
    assert.deepEqual(await res.json(), { status: "ok", role: "gateway", nodes: 2, up: 2 });
  });

  it("keeps routing across a gateway restart (it holds no state)", async () => {
    const c = await cluster({ nodes: 3 });
    const ids = [await createdId(c), await createdId(c), await createdId(c)];
    await c.restartGateway();
    for (const id of ids) assert.equal((await c.call("GET", `/sandboxes/${id}`)).status, 200);
  });
});

/** A request on a fresh connection; `path` may be absolute-form. */
function raw(
  url: string,
  options: { method?: string; path: string; headers?: Record<string, string>; body?: string },
): Promise<{ status: number; headers: IncomingHttpHeaders; body: string }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    request(
      {
        host: hostname,
        port,
        agent: false,
        maxHeaderSize: 128 * 1024,
        method: options.method ?? "GET",
        ...options,
      },
      (res) => {
        let body = "";
        res.on("data", (chunk) => {
          body += chunk;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      },
    )
      .on("error", reject)
      .end(options.body);
  });
}

describe("gateway: relaying as a node's proxy does", () => {
  it("drops every proxy-* header, what Connection names and Expect; keeps Host and routing", async () => {
    const c = await cluster({ nodes: 1 });
    const id = await createdId(c);
    const res = await raw(c.gateway.url, {
      method: "POST",
      path: "/echo",
      headers: {
        host: `49983-${id}.localhost`,
        "e2b-sandbox-id": id,
        "e2b-traffic-access-token": "t0ken",
        connection: "keep-alive, X-Secret-Hop",
        "x-secret-hop": "1",
        "proxy-authorization": "Basic eDp5",
        "proxy-connection": "keep-alive",
        expect: "100-continue",
        "x-kept": "yes",
      },
      body: "payload",
    });
    assert.equal(res.status, 200, res.body);
    const echoed = JSON.parse(res.body) as { headers: IncomingHttpHeaders; body: string };
    const seen = echoed.headers;
    assert.equal(echoed.body, "payload");
    for (const name of ["x-secret-hop", "proxy-authorization", "proxy-connection", "expect"]) {
      assert.equal(seen[name], undefined, `${name} reached the node`);
    }
    assert.equal(seen.host, `49983-${id}.localhost`);
    assert.equal(seen["e2b-sandbox-id"], id);
    assert.equal(seen["e2b-traffic-access-token"], "t0ken");
    assert.equal(seen["x-kept"], "yes");
    assert.equal(seen["x-forwarded-host"], `49983-${id}.localhost`);
    assert.equal(seen["x-forwarded-proto"], "http");
    assert.match(String(seen["x-forwarded-for"]), /127\.0\.0\.1$/);
  });

  it("drops hop-by-hop response headers, those Connection names too", async () => {
    const c = await cluster({ nodes: 1 });
    const id = await createdId(c);
    const res = await raw(c.gateway.url, { path: "/hop", headers: { "e2b-sandbox-id": id } });
    assert.equal(res.body, "hop");
    assert.equal(res.headers["x-kept"], "yes");
    assert.equal(res.headers["x-hop"], undefined);
    assert.equal(res.headers["proxy-agent"], undefined);
  });

  it("relays response heads up to the 64 KiB a node's proxy relays", async () => {
    const c = await cluster({ nodes: 1 });
    const id = await createdId(c);
    const res = await raw(c.gateway.url, { path: "/big-head", headers: { "e2b-sandbox-id": id } });
    assert.equal(res.status, 200, res.body);
    assert.equal(res.headers["x-big"]?.length, 32 * 1024);
  });

  it("reduces an absolute-form target to its path: the node gets it, no other host", async () => {
    const c = await cluster({ nodes: 1 });
    const id = await createdId(c);
    const decoyHits: string[] = [];
    const decoy = createServer((req, res) => {
      decoyHits.push(req.url ?? "");
      res.end("decoy");
    });
    await new Promise<void>((resolve) => decoy.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = decoy.address() as AddressInfo;
      const res = await raw(c.gateway.url, {
        path: `http://127.0.0.1:${port}/hello?x=1`,
        headers: { "e2b-sandbox-id": id },
      });
      assert.deepEqual(decoyHits, []);
      assert.equal((JSON.parse(res.body) as { path: string }).path, "/hello?x=1");
    } finally {
      decoy.closeAllConnections();
      await new Promise((resolve) => decoy.close(resolve));
    }
  });

  it("refuses sandbox traffic as the proxy does: JSON any origin reads, whole on a socket", async () => {
    const c = await cluster({ nodes: 1 });
    const id = await createdId(c);
    await c.cluster
      .catalog(holder(c, id) ?? "")
      .updateSandbox(id, { state: "killed", endedReason: "lost" });
    const res = await raw(c.gateway.url, { path: "/", headers: { "e2b-sandbox-id": id } });
    assert.equal(res.status, 502);
    assert.equal(res.headers["access-control-allow-origin"], "*");
    assert.equal(res.headers["content-type"], "application/json");
    assert.deepEqual(JSON.parse(res.body), {
      sandboxId: id,
      message: "The sandbox was not found",
      code: 502,
    });

    const gateway = new URL(c.gateway.url);
    const socket = connect(Number(gateway.port), gateway.hostname);
    socket.write(
      `GET /ws HTTP/1.1\r\nhost: 49983-${id}.localhost\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n`,
    );
    let received = "";
    for await (const chunk of socket) received += String(chunk);
    const [head = "", body] = received.split("\r\n\r\n");
    assert.match(head, /^HTTP\/1\.1 502 Bad Gateway\r\n/);
    assert.match(head, /\r\ncontent-type: application\/json\r\n/i);
    assert.match(head, /\r\nconnection: close/i);
    assert.deepEqual(JSON.parse(body ?? ""), {
      sandboxId: id,
      message: "The sandbox was not found",
      code: 502,
    });
  });
});

describe("gateway: fork", () => {
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  type Child = { sandbox?: { sandboxID: string }; error?: { reason: string } };

  it("relays a fork its source's node has room for as it is", async () => {
    const c = await cluster({ nodes: 2, maxSandboxes: 6 });
    const id = await createdId(c);
    await sleep(250); // a heartbeat reports it
    const res = await c.call("POST", `/sandboxes/${id}/fork`, { body: { count: 3 } });
    assert.equal(res.status, 201);
    assert.equal(((await res.json()) as Child[]).filter((r) => r.sandbox).length, 3);
    const source = c.nodes.find((n) => n.id === holder(c, id));
    assert.equal(source?.service.callsOf("fork").length, 1, "the public fork, relayed");
    assert.deepEqual(source?.service.callsOf("forkSpilling"), []);
  });

  it("spills the children its source's node has no room for to the other nodes", async () => {
    const c = await cluster({ nodes: 3, maxSandboxes: 6 });
    const id = await createdId(c);
    await sleep(250);
    const res = await c.call("POST", `/sandboxes/${id}/fork`, {
      body: { count: 12, metadata: { run: "r1" } },
    });
    assert.equal(res.status, 201);
    const results = (await res.json()) as Child[];
    assert.equal(results.length, 12);
    assert.deepEqual(
      results.filter((r) => !r.sandbox),
      [],
      "every child started",
    );
    const source = c.nodes.find((n) => n.id === holder(c, id));
    assert.ok(source);
    const [sourceCall] = source.service.callsOf("forkSpilling");
    assert.equal((sourceCall?.[1] as { local?: number } | undefined)?.local, 5, "room beside it");
    const children = results.map((r) => r.sandbox?.sandboxID as string);
    assert.equal(children.filter((child) => holder(c, child) === source.id).length, 5);
    for (const node of c.nodes.filter((n) => n !== source)) {
      assert.deepEqual(node.service.callsOf("fork"), []);
      for (const [sourceId, capture, input] of node.service.callsOf("forkFromCapture")) {
        assert.equal(sourceId, id);
        assert.equal(capture, `fork-of-${id}`);
        assert.deepEqual((input as { metadata?: unknown }).metadata, { run: "r1" });
      }
    }
    assert.equal(new Set(children).size, 12);

    // More than the cluster holds: what no node has room for is a cluster_full child.
    await sleep(250);
    const over = await c.call("POST", `/sandboxes/${id}/fork`, { body: { count: 8 } });
    const reasons = ((await over.json()) as Child[]).map((r) => r.error?.reason ?? "started");
    assert.equal(reasons.length, 8);
    assert.equal(reasons.filter((r) => r === "started").length, 5, reasons.join());
    assert.equal(reasons.filter((r) => r === "cluster_full").length, 3, reasons.join());
  });
});

describe("gateway: lists", () => {
  it("merges v2 pages from every node in E2B's order, tokens walking all of them", async () => {
    const c = await cluster({ nodes: 3 });
    for (const node of c.nodes) for (let i = 0; i < 4; i++) node.service.seed();
    const expected = c.nodes
      .flatMap((node) => [...node.service.sandboxes.values()])
      .sort(
        (a, b) =>
          a.startedAt.getTime() - b.startedAt.getTime() || (a.sandboxId < b.sandboxId ? -1 : 1),
      )
      .map((s) => s.sandboxId);
    for (const order of ["asc", "desc"] as const) {
      const walked: string[] = [];
      let token: string | null = null;
      let pages = 0;
      do {
        const query: string = `limit=5&order=${order}${token ? `&nextToken=${token}` : ""}`;
        const res = await c.call("GET", `/v2/sandboxes?${query}`);
        assert.equal(res.status, 200);
        assert.equal(res.headers.get("x-total-running"), "12");
        walked.push(...((await res.json()) as { sandboxID: string }[]).map((s) => s.sandboxID));
        token = res.headers.get("x-next-token");
        pages += 1;
      } while (token && pages < 10);
      assert.equal(pages, 3);
      assert.deepEqual(walked, order === "asc" ? expected : [...expected].reverse());
    }
    const v1 = await c.call("GET", "/sandboxes");
    assert.deepEqual(
      ((await v1.json()) as { sandboxID: string }[]).map((s) => s.sandboxID),
      expected,
    );
  });

  it("joins many sandboxes' metrics from the nodes that hold them", async () => {
    const c = await cluster({ nodes: 2 });
    const [first, second] = c.nodes.map((node) => node.service.seed().sandboxId);
    for (const node of c.nodes) {
      node.service.metricSamples = [
        {
          timestamp: new Date(),
          cpuCount: 1,
          cpuUsedPct: 5,
          memUsed: 1,
          memTotal: 2,
          memCache: 0,
          diskUsed: 3,
          diskTotal: 4,
        },
      ];
    }
    const res = await c.call("GET", `/sandboxes/metrics?sandbox_ids=${first},${second},gone`);
    assert.equal(res.status, 200);
    const body = (await res.json()) as { sandboxes: Record<string, unknown> };
    assert.deepEqual(Object.keys(body.sandboxes).sort(), [first, second].sort());
    const bad = await c.call("GET", "/sandboxes/metrics");
    assert.equal(bad.status, 400);
  });

  it("a bad query is the nodes' 400, as one node would answer", async () => {
    const c = await cluster({ nodes: 2 });
    const res = await c.call("GET", "/v2/sandboxes?limit=0");
    assert.equal(res.status, 400);
    assert.match(((await res.json()) as { message: string }).message, /limit/);
  });
});
