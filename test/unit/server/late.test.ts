// Late<T>: the one shape of "not ready yet" — the orchestrator, the builds, the teams are each
// a Late the API and the proxy read through, answering the readiness gate's errors until bound.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { ServerStatus } from "../../../src/orchestrator/index.js";
import { Late } from "../../../src/server/late.js";

describe("Late", () => {
  it("answers not_ready, then start_failed, until bound; then the part", () => {
    let status: ServerStatus = { phase: "starting", message: "building the base template" };
    const late = new Late<{ name: string }>(() => status);
    assert.equal(late.current, undefined);
    assert.throws(() => late.get(), {
      reason: "not_ready",
      message: "the server is starting: building the base template",
    });
    status = { phase: "failed", message: "no KVM and no QEMU" };
    assert.throws(() => late.get(), {
      reason: "start_failed",
      message: "the server failed to start: no KVM and no QEMU",
    });
    const part = { name: "orchestrator" };
    late.bind(part);
    assert.equal(late.get(), part);
    assert.equal(late.current, part);
  });

  it("hands the part to those waiting for it, once, and at once to those who come after", () => {
    const late = new Late<string>(() => ({ phase: "starting" }));
    const seen: string[] = [];
    late.whenBound((v) => seen.push(`early ${v}`));
    assert.equal(seen.length, 0);
    late.bind("orchestrator");
    late.whenBound((v) => seen.push(`late ${v}`));
    assert.deepEqual(seen, ["early orchestrator", "late orchestrator"]);
  });
});
