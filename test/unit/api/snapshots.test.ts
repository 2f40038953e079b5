import assert from "node:assert/strict";
import { test } from "node:test";
import { useApi } from "./api-harness.js";

test("fork maps count, timeout and metadata, and answers 201 with one result per child", async () => {
  const { call, service } = useApi();
  const source = service.seed({ metadata: { a: "1" } });
  const res = await call("POST", `/sandboxes/${source.sandboxId}/fork`, {
    body: { count: 3, timeout: 60, metadata: { b: "2" } },
  });
  assert.equal(res.statusCode, 201);
  const body = res.json() as { sandbox: { sandboxID: string; metadata: object } }[];
  assert.equal(body.length, 3);
  assert.deepEqual(body[0]?.sandbox.metadata, { a: "1", b: "2" });
  assert.deepEqual(service.callsOf("fork"), [
    [source.sandboxId, { count: 3, timeoutMs: 60_000, metadata: { b: "2" } }],
  ]);
});

test("fork without a body makes one child; a bad count is 400", async () => {
  const { call, service } = useApi();
  const source = service.seed();
  const one = await call("POST", `/sandboxes/${source.sandboxId}/fork`);
  assert.equal(one.statusCode, 201);
  assert.equal((one.json() as unknown[]).length, 1);
  const bad = await call("POST", `/sandboxes/${source.sandboxId}/fork`, { body: { count: 0 } });
  assert.equal(bad.statusCode, 400);
  assert.match(bad.json().message, /count/);
  const unknown = await call("POST", "/sandboxes/nosuch/fork", { body: { count: 1 } });
  assert.equal(unknown.statusCode, 404);
});

test("snapshots: create, list with pagination, delete by snapshot id", async () => {
  const { call, service } = useApi();
  const source = service.seed();
  const first = await call("POST", `/sandboxes/${source.sandboxId}/snapshots`, {
    body: { name: "warm" },
  });
  assert.equal(first.statusCode, 201);
  assert.deepEqual(first.json(), { snapshotID: "warm:default", names: ["warm:default"] });
  await call("POST", `/sandboxes/${source.sandboxId}/snapshots`);

  const page1 = await call("GET", "/snapshots?limit=1");
  assert.equal(page1.statusCode, 200);
  assert.deepEqual(page1.json(), [{ snapshotID: "warm:default", names: ["warm:default"] }]);
  const token = page1.headers["x-next-token"];
  assert.equal(typeof token, "string");
  const page2 = await call("GET", `/snapshots?limit=1&nextToken=${token}`);
  assert.equal((page2.json() as unknown[]).length, 1);
  assert.equal(page2.headers["x-next-token"], undefined);

  const deleted = await call("DELETE", `/templates/${encodeURIComponent("warm:default")}`);
  assert.equal(deleted.statusCode, 204);
  assert.deepEqual(service.callsOf("deleteTemplate"), [["warm:default"]]);
  const again = await call("DELETE", `/templates/${encodeURIComponent("warm:default")}`);
  assert.equal(again.statusCode, 404);
});

test("a stored snapshot forks: 201 with one result per child, its id URL-encoded; unknown is 404", async () => {
  const { call, service } = useApi();
  const source = service.seed();
  await call("POST", `/sandboxes/${source.sandboxId}/snapshots`, { body: { name: "warm" } });
  await service.kill(source.sandboxId);
  const res = await call("POST", `/snapshots/${encodeURIComponent("warm:default")}/fork`, {
    body: { count: 3, timeout: 60 },
  });
  assert.equal(res.statusCode, 201, res.body);
  const body = res.json() as { sandbox: { sandboxID: string } }[];
  assert.equal(body.length, 3);
  assert.equal(new Set(body.map((r) => r.sandbox.sandboxID)).size, 3);
  assert.deepEqual(service.callsOf("forkSnapshot"), [
    ["warm:default", "default", { count: 3, timeoutMs: 60_000, metadata: undefined }],
  ]);
  const unknown = await call("POST", "/snapshots/nosuch/fork", { body: { count: 1 } });
  assert.equal(unknown.statusCode, 404);
  const bad = await call("POST", "/snapshots/warm/fork", { body: { count: 0 } });
  assert.equal(bad.statusCode, 400);
});
