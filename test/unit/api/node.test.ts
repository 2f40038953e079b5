import assert from "node:assert/strict";
import { it } from "node:test";
import { TEST_ADMIN_TOKEN } from "../../helpers/auth.js";
import { useApi } from "./api-harness.js";

const asAdmin = { apiKey: null, headers: { "x-admin-token": TEST_ADMIN_TOKEN } };

it("GET /node and /lineage: what the node holds and where its sandboxes came from", async () => {
  const { call, service } = useApi();
  service.seed({ sandboxId: "src" });
  const forked = await call("POST", "/sandboxes/src/fork", { body: { count: 2 } });
  const children = (forked.json() as { sandbox: { sandboxID: string } }[]).map(
    (r) => r.sandbox.sandboxID,
  );
  const node = (await call("GET", "/node", asAdmin)).json();
  assert.equal(node.status, "ready");
  assert.equal(node.sandboxesByState.running, 3);
  assert.equal(node.capacity.sandboxes, 3);
  const lineage = (await call("GET", "/lineage", asAdmin)).json() as {
    sandboxId: string;
    parentId?: string;
    via: string;
  }[];
  const of = (id: string) => lineage.find((l) => l.sandboxId === id);
  assert.equal(of("src")?.via, "template");
  for (const child of children)
    assert.deepEqual([of(child)?.parentId, of(child)?.via], ["src", "fork"]);
  assert.equal((await call("GET", "/node", { apiKey: null })).statusCode, 401);
});
