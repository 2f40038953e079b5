// LateBound stands in for the orchestrator while the server starts, then forwards to it:
// before bind it answers the readiness gate's errors; after, the whole contract.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { ServerStatus } from "../../../src/orchestrator/index.js";
import { LateBound } from "../../../src/server/late-bound.js";
import { createInput, sandboxServiceContract } from "../../contracts/sandbox-service.contract.js";
import { FakeNode } from "../../fakes/fake-node.js";

sandboxServiceContract("LateBound, bound to an orchestrator on fakes", async () => {
  const node = await FakeNode.start();
  const late = new LateBound(() => ({ phase: "starting" }));
  late.bind(node.orchestrator);
  const { restart: _restart, ...harness } = node.harness();
  return { ...harness, service: late, router: late };
});

describe("LateBound before bind", () => {
  it("answers not_ready (or start_failed) and routes nothing", async () => {
    let status: ServerStatus = { phase: "starting", message: "building the base template" };
    const late = new LateBound(() => status);
    assert.equal(late.status().phase, "starting");
    await assert.rejects(late.create(createInput("base")), {
      reason: "not_ready",
      message: "the server is starting: building the base template",
    });
    assert.throws(() => late.list({}), { reason: "not_ready" });
    assert.deepEqual(await late.route("abc", 8080, () => true), { kind: "not_found" });
    status = { phase: "failed", message: "no KVM and no QEMU" };
    await assert.rejects(late.pause("abc"), {
      reason: "start_failed",
      message: "the server failed to start: no KVM and no QEMU",
    });
  });

  it("hands stop listeners registered early to the orchestrator it is bound to", async (t) => {
    const node = await FakeNode.start();
    t.after(() => node.close());
    const late = new LateBound(() => ({ phase: "starting" }));
    const stopped: string[] = [];
    late.onSandboxStopped((id) => stopped.push(id));
    late.bind(node.orchestrator);
    const info = await late.create(createInput("base"));
    await late.pause(info.sandboxId);
    assert.deepEqual(stopped, [info.sandboxId]);
  });
});
