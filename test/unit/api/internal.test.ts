import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { INTERNAL_PATHS } from "../../../src/protocol/index.js";
import { InMemorySandboxService } from "../../fakes/in-memory-sandbox-service.js";
import { errorOf, useApi } from "./api-harness.js";

/**
 * Stands in for the server's answer to "did this come from a gateway?" (its TLS peer's
 * certificate, test/unit/server/cluster-port.test.ts): here, a request carrying this header.
 */
const STAND_IN_PEER = "x-stand-in-peer";
const fromGateway = { [STAND_IN_PEER]: "gateway" };

/** An API whose internal routes act on the same stand-in service as its public ones. */
function useClusterNode() {
  const service = new InMemorySandboxService();
  return useApi({
    service,
    internal: {
      service: () => service,
      fromControl: (req) => req.headers[STAND_IN_PEER] === "gateway",
    },
  });
}

describe("the public fork takes no cluster-only fields", () => {
  it("a tenant's `local` and `fromSnapshot` are ignored: every child starts from the source", async () => {
    const { call, service } = useApi();
    const source = service.seed();
    const res = await call("POST", `/sandboxes/${source.sandboxId}/fork`, {
      body: { count: 2, local: 0, fromSnapshot: "another-sandboxes-capture" },
    });
    assert.equal(res.statusCode, 201);
    const children = res.json() as { sandbox?: unknown; spilled?: unknown }[];
    assert.deepEqual(
      children.map((child) => Object.keys(child)),
      [["sandbox"], ["sandbox"]],
    );
    assert.deepEqual(service.callsOf("forkSpilling"), []);
    assert.deepEqual(service.callsOf("forkFromCapture"), []);
  });
});

describe("the internal node API", () => {
  it("does not exist on a node outside a cluster", async () => {
    const { call, service } = useApi();
    const source = service.seed();
    const res = await call("POST", INTERNAL_PATHS.spillingFork(source.sandboxId), {
      body: { count: 2, local: 1 },
    });
    assert.equal(res.statusCode, 404);
    assert.equal(errorOf(res).code, 404);
  });

  it("refuses whatever does not come from a gateway with 403 internal_route: API keys, the retired cluster key", async () => {
    const { call, service } = useClusterNode();
    const source = service.seed();
    const path = INTERNAL_PATHS.spillingFork(source.sandboxId);
    const attempts: Record<string, string>[] = [
      {},
      { "x-warren-cluster-key": "k".repeat(43) },
      { [STAND_IN_PEER]: "node" },
    ];
    for (const headers of attempts) {
      const res = await call("POST", path, { body: { count: 2, local: 1 }, headers });
      assert.equal(res.statusCode, 403);
      assert.equal(res.json().reason, "internal_route");
    }
    for (const drain of [INTERNAL_PATHS.drain, INTERNAL_PATHS.adopt(source.sandboxId)]) {
      assert.equal((await call("POST", drain)).statusCode, 403);
    }
    assert.deepEqual(service.callsOf("forkSpilling"), []);
    assert.deepEqual(service.callsOf("drain"), []);
    assert.deepEqual(service.callsOf("adopt"), []);
  });

  it("from a gateway: a spilling fork, children from a capture, adopt, drain", async () => {
    const { call, service } = useClusterNode();
    const source = service.seed();
    const headers = fromGateway;
    const spill = await call("POST", INTERNAL_PATHS.spillingFork(source.sandboxId), {
      body: { count: 3, local: 1, metadata: { run: "r" } },
      headers,
      apiKey: null,
    });
    assert.equal(spill.statusCode, 201);
    const results = spill.json() as { sandbox?: unknown; spilled?: { snapshotID: string } }[];
    assert.equal(results.filter((r) => r.sandbox).length, 1);
    assert.deepEqual(
      results.filter((r) => r.spilled).map((r) => r.spilled?.snapshotID),
      [`fork-of-${source.sandboxId}`, `fork-of-${source.sandboxId}`],
    );
    assert.deepEqual(service.callsOf("forkSpilling"), [
      [source.sandboxId, { count: 3, local: 1, timeoutMs: undefined, metadata: { run: "r" } }],
    ]);

    const capture = `fork-of-${source.sandboxId}`;
    const children = await call("POST", INTERNAL_PATHS.forkFromCapture(source.sandboxId, capture), {
      body: { count: 2, timeout: 60 },
      headers,
      apiKey: null,
    });
    assert.equal(children.statusCode, 201);
    assert.equal((children.json() as unknown[]).length, 2);
    assert.deepEqual(service.callsOf("forkFromCapture"), [
      [source.sandboxId, capture, { count: 2, timeoutMs: 60_000, metadata: undefined }],
    ]);

    const adopt = await call("POST", INTERNAL_PATHS.adopt(source.sandboxId), { headers });
    assert.equal(adopt.statusCode, 204);
    assert.deepEqual(service.callsOf("adopt"), [[source.sandboxId]]);
    assert.equal((await call("POST", INTERNAL_PATHS.drain, { headers })).statusCode, 202);
    assert.equal((await call("POST", INTERNAL_PATHS.undrain, { headers })).statusCode, 204);
    assert.deepEqual(
      service.calls.map((c) => c.method).filter((m) => m === "drain" || m === "undrain"),
      ["drain", "undrain"],
    );
  });

  it("checks bodies as the public routes do", async () => {
    const { call, service } = useClusterNode();
    const source = service.seed();
    const headers = fromGateway;
    const path = INTERNAL_PATHS.spillingFork(source.sandboxId);
    const noLocal = await call("POST", path, { body: { count: 2 }, headers });
    assert.equal(noLocal.statusCode, 400);
    assert.match(errorOf(noLocal).message, /local/);
    const badCount = await call("POST", path, { body: { count: 0, local: 0 }, headers });
    assert.equal(badCount.statusCode, 400);
    const badId = await call("POST", INTERNAL_PATHS.adopt("Not-An-Id"), { headers });
    assert.equal(badId.statusCode, 404);
  });
});
