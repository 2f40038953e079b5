import assert from "node:assert/strict";
import { type ClientRequest, request as httpRequest, type IncomingHttpHeaders } from "node:http";
import { request as httpsRequest } from "node:https";
import { describe, it } from "node:test";
import { CONTROL_ALPN, clusterClientOptions } from "../../../src/tls/index.js";
import { API_KEY, type TestCluster, useTestClusters } from "../../helpers/gateway-cluster.js";

// The cluster's internal node API is the gateway's own: no client traffic reaches it, whatever
// the client sends, and a node answers it only on the gateway's control connections.

const cluster = useTestClusters();

async function createdId(c: TestCluster, apiKey = API_KEY): Promise<string> {
  const res = await c.call("POST", "/sandboxes", {
    apiKey,
    body: { templateID: "base", timeout: 300 },
  });
  assert.equal(res.status, 201, await res.clone().text());
  return ((await res.json()) as { sandboxID: string }).sandboxID;
}

interface Answer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/** The answer to `req`, read whole. */
function answerOf(req: ClientRequest, body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    req.on("response", (res) => {
      let text = "";
      res.on("data", (chunk) => {
        text += chunk;
      });
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }),
      );
    });
    req.on("error", reject);
    req.end(body);
  });
}

/** A request through node:http, which sends the Connection header it is given. */
function raw(
  url: string,
  options: { method?: string; path: string; headers: Record<string, string>; body?: string },
): Promise<Answer> {
  const req = httpRequest(`${url}${options.path}`, {
    method: options.method ?? "POST",
    headers: options.headers,
  });
  return answerOf(req, options.body);
}

/** What reached any node's internal API or its proxy (the attacks must reach neither). */
function internalCalls(c: TestCluster): string[] {
  return c.nodes.flatMap((node) => [
    ...node.service.calls
      .filter((call) => ["forkSpilling", "forkFromCapture", "adopt", "drain"].includes(call.method))
      .map((call) => `${node.id} ${call.method}`),
    ...node.proxied.filter((line) => line.includes("/internal")).map((l) => `${node.id} ${l}`),
  ]);
}

describe("gateway: the internal node API is out of client traffic's reach", () => {
  it("a Connection header naming the routing header gets 400, and nothing reaches a node", async () => {
    const c = await cluster({ nodes: 2, gateway: { domain: "sandboxes.test" } });
    const victim = await createdId(c);
    const attacks: Record<string, string>[] = [
      // Sandbox traffic by header: the relay used to strip E2b-Sandbox-Id, and the node took
      // the request for an API call arriving over the gateway's own certificate.
      { "e2b-sandbox-id": victim, connection: "e2b-sandbox-id" },
      { "e2b-sandbox-id": victim, "e2b-sandbox-port": "49983", connection: "E2B-Sandbox-Id" },
      // Sandbox traffic by Host: without it the node saw its own address as Host.
      { host: `49983-${victim}.sandboxes.test`, connection: "host" },
      { host: `49983-${victim}.sandboxes.test`, connection: "keep-alive, Host" },
    ];
    const paths = [
      `/internal/sandboxes/${victim}/fork`,
      `/internal/sandboxes/${victim}/fork/snap-1`,
      "/internal/node/drain",
    ];
    for (const headers of attacks) {
      for (const path of paths) {
        const answer = await raw(c.gateway.url, {
          path,
          headers: { ...headers, "content-type": "application/json" },
          // A body the internal fork takes: before the fix, this forked the victim.
          body: JSON.stringify({ count: 1, local: 1 }),
        });
        assert.equal(answer.status, 400, `${JSON.stringify(headers)} ${path}: ${answer.body}`);
        const body = JSON.parse(answer.body) as { code: number; message: string };
        assert.equal(body.code, 400);
        assert.match(body.message, /Connection/);
      }
    }
    assert.deepEqual(internalCalls(c), []);
    assert.deepEqual(
      c.nodes.map((node) => c.cluster.nodes.get(node.id)?.state),
      ["up", "up"],
      "no node was drained",
    );
  });

  it("/internal on the API's paths is the gateway's 404, with or without a key", async () => {
    const c = await cluster({ nodes: 1 });
    const victim = await createdId(c);
    for (const apiKey of [null, API_KEY]) {
      const res = await c.call("POST", `/internal/sandboxes/${victim}/fork`, {
        apiKey,
        body: { count: 1, local: 1 },
      });
      assert.equal(res.status, 404);
      assert.equal(((await res.json()) as { code: number }).code, 404);
    }
    assert.deepEqual(internalCalls(c), []);
  });

  it("a node answers /internal only on a gateway's control connection, and nothing else there", async () => {
    const c = await cluster({ nodes: 1 });
    const [node] = c.nodes;
    assert.ok(node);
    const victim = await createdId(c);
    const gateway = await c.pki.issue({ role: "gateway", name: "gateway" });
    const call = (path: string, alpn: string[] | undefined, headers: Record<string, string> = {}) =>
      answerOf(
        httpsRequest(`${node.url}${path}`, {
          method: "POST",
          ...clusterClientOptions(gateway, node.id),
          ...(alpn && { ALPNProtocols: alpn }),
          agent: false,
          headers: { "content-type": "application/json", ...headers },
        }),
        JSON.stringify({ count: 1, local: 1 }),
      );
    // The relay's connections (the certificate every client request also arrives on): refused.
    for (const alpn of [undefined, ["http/1.1"]]) {
      const relayed = await call(`/internal/sandboxes/${victim}/fork`, alpn);
      assert.equal(relayed.status, 403, relayed.body);
      assert.equal((JSON.parse(relayed.body) as { reason: string }).reason, "internal_route");
    }
    assert.deepEqual(internalCalls(c), []);
    // The control channel: the internal API, and only it (no API route, no sandbox traffic).
    const control = await call(`/internal/sandboxes/${victim}/fork`, [CONTROL_ALPN]);
    assert.equal(control.status, 201, control.body);
    const apiThere = await call("/sandboxes", [CONTROL_ALPN], { "x-api-key": API_KEY });
    assert.equal(apiThere.status, 404, apiThere.body);
    const trafficThere = await call("/files", [CONTROL_ALPN], { "e2b-sandbox-id": victim });
    assert.equal(trafficThere.status, 404, trafficThere.body);
    assert.ok(!node.proxied.some((line) => line.includes("/files")));
  });
});
