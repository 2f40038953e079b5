// Bad input against the real server: each gets the documented JSON error, the server keeps
// serving, and nothing (VM, slot, runtime dir) is left behind.
import assert from "node:assert/strict";
import { request } from "node:http";
import { describe, it } from "node:test";
import { Sandbox } from "e2b";
import { vmLeftovers } from "../helpers/leak-check.js";
import { api, type TestServer, useServer } from "../helpers/server.js";

// A node that holds two sandboxes at most, to reach its capacity limit; no warm pool, so
// that every VMM on the host belongs to a sandbox the test can see.
const server = useServer({
  WARREN_MAX_SANDBOXES: "2",
  WARREN_POOL_SIZE: "0",
  WARREN_POOL_MAX_PER_TEMPLATE: "0",
});

function assertError(res: { status: number; body: unknown }, status: number, pattern?: RegExp) {
  const body = res.body as { code?: number; message?: string };
  assert.equal(res.status, status, JSON.stringify(body));
  assert.equal(body.code, status);
  assert.equal(typeof body.message, "string");
  if (pattern) assert.match(body.message ?? "", pattern);
}

/** No VM running and only idle pool slots: what the server holds when no sandbox exists. */
async function assertNothingRunning() {
  const running = await api(server, "GET", "/v2/sandboxes?state=running");
  assert.deepEqual(running.body, []);
  assert.deepEqual(await vmLeftovers(`${server.dataDir}/run`), []);
}

describe("bad requests", () => {
  it("a wrong API key is 401", async () => {
    assertError(await api(server, "GET", "/v2/sandboxes", undefined, { "x-api-key": "nope" }), 401);
  });

  it("malformed JSON is 400", async () => {
    assertError(await api(server, "POST", "/v2/sandboxes", "{ not json"), 400);
  });

  it("wrong types are 400 and name the field", async () => {
    assertError(await api(server, "POST", "/v2/sandboxes", { timeout: "30" }), 400, /timeout/);
    assertError(
      await api(server, "POST", "/v2/sandboxes", { metadata: { a: 1 } }),
      400,
      /metadata/,
    );
    assertError(await api(server, "POST", "/v2/sandboxes", { timeout: -5 }), 400, /timeout/);
  });

  it("a huge body is 413", async () => {
    const body = JSON.stringify({ metadata: { big: "x".repeat(5 * 1024 * 1024) } });
    assertError(await rawPost(server, "/v2/sandboxes", body), 413);
  });

  it("an unknown template is 404", async () => {
    assertError(
      await api(server, "POST", "/v2/sandboxes", { templateID: "nosuch" }),
      404,
      /nosuch/,
    );
  });

  it("unknown fields are ignored", async () => {
    const res = await api(server, "POST", "/v2/sandboxes", { templateID: "base", frobnicate: 1 });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    const id = (res.body as { sandboxID: string }).sandboxID;
    assert.equal((await api(server, "DELETE", `/sandboxes/${id}`)).status, 204);
  });

  it("unknown sandbox ids are 404 on every route", async () => {
    for (const [method, path] of [
      ["GET", "/sandboxes/nosuchsandbox"],
      ["DELETE", "/sandboxes/nosuchsandbox"],
      ["POST", "/sandboxes/nosuchsandbox/pause"],
      ["POST", "/sandboxes/nosuchsandbox/connect"],
      ["POST", "/sandboxes/nosuchsandbox/timeout"],
      ["GET", "/sandboxes/nosuchsandbox/metrics"],
      ["GET", "/sandboxes/bad.id-x"],
    ] as const) {
      const body = method === "POST" ? { timeout: 10 } : undefined;
      assertError(await api(server, method, path, body), 404);
    }
  });

  it("nothing was left running by the bad requests", assertNothingRunning);
});

describe("wrong state", () => {
  it("a double pause is 409, and resume of a running sandbox is 409", async () => {
    const sandbox = await Sandbox.create();
    try {
      assert.equal(
        (await api(server, "POST", `/sandboxes/${sandbox.sandboxId}/pause`)).status,
        204,
      );
      assertError(await api(server, "POST", `/sandboxes/${sandbox.sandboxId}/pause`), 409);
      await Sandbox.connect(sandbox.sandboxId);
      assertError(await api(server, "POST", `/sandboxes/${sandbox.sandboxId}/resume`, {}), 409);
    } finally {
      await sandbox.kill();
    }
  });

  it("kill during create: the create fails, the kill succeeds, nothing is left", async () => {
    const seen = server.logs.length;
    const creating = api(server, "POST", "/v2/sandboxes", {
      templateID: "base",
      metadata: { k: "dc" },
    });
    let id: string | undefined;
    // The sandbox is in the catalog (state creating) before its VM answers: find it in the log.
    for (let i = 0; i < 400 && !id; i++) {
      await new Promise((resolve) => setTimeout(resolve, 5));
      const line = server.logs.slice(seen).find((l) => l.msg === "sandbox.creating");
      id = line?.sandboxId as string | undefined;
    }
    assert.ok(id, "saw the create start");
    const kill = await api(server, "DELETE", `/sandboxes/${id}`);
    assert.equal(kill.status, 204);
    const created = await creating;
    assertError(created, 409, /killed while it was being created/);
    assertError(await api(server, "GET", `/sandboxes/${id}`), 404);
    await assertNothingRunning();
  });

  it("concurrent pauses of one sandbox are serialised: one 204, one 409", async () => {
    const sandbox = await Sandbox.create();
    try {
      const results = await Promise.all([
        api(server, "POST", `/sandboxes/${sandbox.sandboxId}/pause`),
        api(server, "POST", `/sandboxes/${sandbox.sandboxId}/pause`),
      ]);
      assert.deepEqual(results.map((r) => r.status).sort(), [204, 409]);
    } finally {
      await sandbox.kill();
    }
  });

  it("past the node's capacity a create is 429 with Retry-After, and nothing is left", async () => {
    const held = [await Sandbox.create(), await Sandbox.create()];
    try {
      const refused = await api(server, "POST", "/v2/sandboxes", { templateID: "base" });
      assertError(refused, 429, /capacity/);
      assert.ok(Number(refused.headers.get("retry-after")) >= 1);
    } finally {
      for (const sandbox of held) await sandbox.kill();
    }
    const running = await api(server, "GET", "/v2/sandboxes?state=running");
    assert.deepEqual(running.body, []);
  });

  it("the server still serves after all of the above", async () => {
    const sandbox = await Sandbox.create();
    assert.equal((await sandbox.commands.run("echo ok")).stdout, "ok\n");
    await sandbox.kill();
    await assertNothingRunning();
  });
});

/** POST with node:http, which writes the whole body before it reads the answer. */
function rawPost(server: TestServer, path: string, body: string) {
  return new Promise<{ status: number; body: unknown }>((resolve, reject) => {
    const req = request(`${server.url}${path}`, {
      method: "POST",
      headers: { "x-api-key": server.apiKey, "content-type": "application/json" },
    });
    req.on("response", (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        text += chunk;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
    });
    req.on("error", reject);
    req.end(body);
  });
}
