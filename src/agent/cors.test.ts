import assert from "node:assert/strict";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { CORS_ALLOWED_HEADERS, CORS_ALLOWED_METHODS, CORS_EXPOSED_HEADERS } from "./cors.js";
import { type Agent, createAgent } from "./server.js";

// The agent in-process on a loopback port: preflights and /health need no root.
let agent: Agent;
let url: string;
before(async () => {
  agent = createAgent();
  await new Promise<void>((resolve) => agent.server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(agent.server.address() as AddressInfo).port}`;
});
after(() => agent.close());

function preflight(path: string, method: string, headers: string[]): Promise<Response> {
  return fetch(`${url}${path}`, {
    method: "OPTIONS",
    headers: {
      Origin: "https://app.example",
      "Access-Control-Request-Method": method,
      ...(headers.length > 0 && { "Access-Control-Request-Headers": headers.join(",") }),
    },
  });
}

const list = (value: string | null) => (value ?? "").split(",").map((s) => s.trim());

/** What the e2b SDK sends on a command run / file write from a browser (lower-cased, as browsers do). */
const SDK_RPC_HEADERS = [
  "authorization",
  "connect-protocol-version",
  "connect-timeout-ms",
  "content-type",
  "e2b-sandbox-id",
  "e2b-sandbox-port",
  "keepalive-ping-interval",
  "user-agent",
  "x-access-token",
];

describe("envd CORS", () => {
  it("cors: a preflight for what the SDK sends is granted with exactly the allowed lists", async () => {
    const res = await preflight("/process.Process/Start", "POST", SDK_RPC_HEADERS);
    assert.equal(res.status, 204);
    assert.equal(res.headers.get("access-control-allow-origin"), "*");
    assert.deepEqual(list(res.headers.get("access-control-allow-methods")), [
      "GET",
      "HEAD",
      "POST",
    ]);
    assert.deepEqual(list(res.headers.get("access-control-allow-headers")), CORS_ALLOWED_HEADERS);
    assert.equal(res.headers.get("access-control-max-age"), "7200");
    assert.ok(!CORS_ALLOWED_HEADERS.includes("*") && !CORS_ALLOWED_METHODS.includes("*"));
  });

  it("cors: an upload's X-Metadata-<key> headers are granted by name, echoed back", async () => {
    const res = await preflight("/files", "POST", [
      "content-type",
      "content-encoding",
      "x-metadata-owner",
      "X-Metadata-Build.Id",
    ]);
    assert.equal(res.headers.get("access-control-allow-origin"), "*");
    assert.deepEqual(list(res.headers.get("access-control-allow-headers")), [
      ...CORS_ALLOWED_HEADERS,
      "x-metadata-owner",
      "x-metadata-build.id",
    ]);
  });

  it("cors: a preflight for a disallowed method or header is not granted", async () => {
    for (const [method, headers] of [
      ["DELETE", ["content-type"]],
      ["PUT", []],
      ["PATCH", ["x-access-token"]],
      ["POST", ["content-type", "x-api-key"]],
      ["POST", ["cookie"]],
      ["GET", ["x-metadata-"]],
      ["GET", ["x-metadata-a b"]],
    ] as const) {
      const res = await preflight("/files", method, [...headers]);
      assert.equal(res.status, 204, `${method} ${headers}`);
      for (const name of ["origin", "methods", "headers"]) {
        assert.equal(res.headers.get(`access-control-allow-${name}`), null, `${method} ${headers}`);
      }
    }
  });

  it("cors: responses carry origin * and expose only the listed headers", async () => {
    const res = await fetch(`${url}/health`, { headers: { Origin: "https://app.example" } });
    assert.equal(res.status, 204);
    assert.equal(res.headers.get("access-control-allow-origin"), "*");
    assert.deepEqual(list(res.headers.get("access-control-expose-headers")), CORS_EXPOSED_HEADERS);
    assert.equal(res.headers.get("access-control-allow-credentials"), null);
  });
});
