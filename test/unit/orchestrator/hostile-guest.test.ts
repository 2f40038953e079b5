// The orchestrator facing a guest whose user replaced envd (its root user may): resumes and
// creates from its snapshots meet a hostile server where envd was. On fakes, except for the
// guest: the fake agent sends every call to a replaced envd over HTTP with the real
// EnvdGuestAgent, to a hostile stand-in on a loopback address (test/helpers/hostile-envd.ts).
// What must hold: each start fails within its bound, a kill or a pause never waits on the
// guest, the start permits go on serving healthy creates, closing never waits on a guest.
import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import { WarrenError } from "../../../src/shared/index.js";
import { createInput } from "../../contracts/sandbox-service.contract.js";
import { REPLACED_ENVD } from "../../fakes/fake-guest-agent.js";
import { FakeNode, type FakeNodeSettings } from "../../fakes/fake-node.js";
import type { FakeVm } from "../../fakes/fake-vmm-driver.js";
import { HostileEnvd, type HostileMode } from "../../helpers/hostile-envd.js";

const SLACK_MS = 1_500;

async function startNode(t: TestContext, settings: FakeNodeSettings = {}): Promise<FakeNode> {
  const node = await FakeNode.start(settings);
  t.after(() => node.close());
  return node;
}

async function hostile(t: TestContext, mode: HostileMode): Promise<HostileEnvd> {
  const envd = await HostileEnvd.start({ mode, intervalMs: 100 });
  t.after(() => envd.close());
  return envd;
}

function vmOf(node: FakeNode, sandboxId: string): FakeVm {
  const vm = [...node.driver.alive].find((v) => v.id === sandboxId);
  assert.ok(vm, `sandbox ${sandboxId} has a live VMM`);
  return vm;
}

/** A paused sandbox whose user replaced envd with `envd` before the pause. */
async function pausedWithReplacedEnvd(node: FakeNode, envd: HostileEnvd): Promise<string> {
  const { sandboxId } = await node.orchestrator.create(createInput("base"));
  vmOf(node, sandboxId).guest.memory[REPLACED_ENVD] = envd.host;
  await node.orchestrator.pause(sandboxId);
  return sandboxId;
}

async function until(check: () => boolean, what: string, withinMs = 5_000): Promise<void> {
  const deadline = Date.now() + withinMs;
  while (!check()) {
    if (Date.now() > deadline) assert.fail(`not within ${withinMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

async function timed<T>(
  work: Promise<T>,
): Promise<{ ms: number; result: PromiseSettledResult<T> }> {
  const started = performance.now();
  const [result] = await Promise.allSettled([work]);
  return { ms: performance.now() - started, result: result as PromiseSettledResult<T> };
}

function rejectedWith(result: PromiseSettledResult<unknown>, reason: string): void {
  assert.equal(result.status, "rejected", "the call failed");
  const err = (result as PromiseRejectedResult).reason as unknown;
  assert.ok(err instanceof WarrenError, `a WarrenError, got ${String(err)}`);
  assert.equal(err.reason, reason, err.message);
}

describe("Orchestrator with a guest whose envd was replaced", () => {
  for (const mode of ["silent", "trickle", "huge-headers", "endless", "stalled"] as const) {
    it(`a resume whose guest's envd is ${mode} fails within the envd deadline, the sandbox paused again`, async (t) => {
      const node = await startNode(t, { envdDeadlineMs: 1_000, maxConcurrentStarts: 1 });
      const envd = await hostile(t, mode);
      const sandboxId = await pausedWithReplacedEnvd(node, envd);
      const { ms, result } = await timed(node.orchestrator.connect(sandboxId, undefined));
      assert.ok(ms < 1_000 + SLACK_MS, `failed after ${Math.round(ms)} ms`);
      rejectedWith(
        result,
        mode === "huge-headers" || mode === "endless" ? "guest_reply_invalid" : "guest_unavailable",
      );
      assert.equal(node.orchestrator.get(sandboxId).state, "paused");
      await envd.allClosed();
      // The one start permit is free again: a healthy create proceeds.
      const healthy = await node.orchestrator.create(createInput("base"));
      assert.equal(healthy.state, "running");
    });
  }

  it("a kill of a sandbox whose guest hangs in /init completes promptly", async (t) => {
    const node = await startNode(t, { envdDeadlineMs: 60_000 });
    const envd = await hostile(t, "silent");
    const sandboxId = await pausedWithReplacedEnvd(node, envd);
    const resuming = node.orchestrator.connect(sandboxId, undefined);
    resuming.catch(() => {});
    await until(() => envd.requests.includes("POST /init"), "the guest got /init");
    const { ms, result } = await timed(node.orchestrator.kill(sandboxId));
    assert.equal(result.status, "fulfilled");
    assert.ok(ms < 1_000, `the kill took ${Math.round(ms)} ms`);
    rejectedWith(
      (await Promise.allSettled([resuming]))[0] as PromiseSettledResult<unknown>,
      "sandbox_killed",
    );
    await envd.allClosed();
    assert.deepEqual(await node.leaks(), []);
  });

  it("a guest hanging in /init gives its start permit up: a healthy create proceeds meanwhile", async (t) => {
    const node = await startNode(t, {
      envdDeadlineMs: 60_000,
      maxConcurrentStarts: 1,
      startPermitLeaseMs: 200,
    });
    const envd = await hostile(t, "trickle");
    const sandboxId = await pausedWithReplacedEnvd(node, envd);
    const resuming = node.orchestrator.connect(sandboxId, undefined);
    resuming.catch(() => {});
    await until(() => envd.requests.includes("POST /init"), "the guest got /init");
    const { ms, result } = await timed(node.orchestrator.create(createInput("base")));
    assert.equal(result.status, "fulfilled", "the healthy create succeeded");
    assert.ok(ms < 200 + SLACK_MS, `the healthy create took ${Math.round(ms)} ms`);
    assert.ok(node.logger.events("sandbox.init_slow_permit_released").length > 0);
    // The hostile start still holds its sandbox's lock: a kill ends it at once.
    const kill = await timed(node.orchestrator.kill(sandboxId));
    assert.ok(kill.ms < 1_000, `the kill took ${Math.round(kill.ms)} ms`);
    await envd.allClosed();
  });

  it("metrics of a sandbox whose envd trickles are aborted at once by a pause", async (t) => {
    const node = await startNode(t);
    const envd = await hostile(t, "trickle-body");
    const { sandboxId } = await node.orchestrator.create(createInput("base"));
    vmOf(node, sandboxId).guest.memory[REPLACED_ENVD] = envd.host;
    const metrics = node.orchestrator.metrics(sandboxId, {});
    metrics.catch(() => {});
    await until(() => envd.requests.includes("GET /metrics"), "the guest got /metrics");
    const pause = await timed(node.orchestrator.pause(sandboxId));
    assert.equal(pause.result.status, "fulfilled");
    const { ms, result } = await timed(metrics);
    assert.ok(ms < 500, `metrics ended ${Math.round(ms)} ms after the pause`);
    rejectedWith(result, "guest_unavailable");
    await envd.allClosed();
  });

  it("closing the server while the warm pool warms a hostile template's VMM does not wait on it", async (t) => {
    const node = await startNode(t, {
      envdDeadlineMs: 300,
      pool: { maxPerTemplate: 2, refillDelayMs: 0 },
    });
    const envd = await hostile(t, "silent");
    const { sandboxId } = await node.orchestrator.create(createInput("base"));
    vmOf(node, sandboxId).guest.memory[REPLACED_ENVD] = envd.host;
    await node.orchestrator.createSnapshot(sandboxId, { name: "evil" });
    await node.orchestrator.kill(sandboxId);
    // A create from it is demand for its pool; the create itself fails at /init.
    const create = await timed(node.orchestrator.create(createInput("evil")));
    rejectedWith(create.result, "guest_unavailable");
    await until(() => envd.requests.includes("GET /health"), "the pool warms an evil VMM");
    const close = await timed(node.orchestrator.close());
    assert.equal(close.result.status, "fulfilled");
    assert.ok(close.ms < 1_000, `close took ${Math.round(close.ms)} ms`);
    await envd.allClosed();
  });

  it("a template whose warm-up fails does not hold up other templates' pools", async (t) => {
    const node = await startNode(t, { pool: { maxPerTemplate: 1, refillDelayMs: 0 } });
    const envd = await hostile(t, "huge-headers");
    const { sandboxId } = await node.orchestrator.create(createInput("base"));
    vmOf(node, sandboxId).guest.memory[REPLACED_ENVD] = envd.host;
    await node.orchestrator.createSnapshot(sandboxId, { name: "evil" });
    await node.orchestrator.kill(sandboxId);
    await node.orchestrator.create(createInput("evil")).catch(() => {});
    await until(() => node.logger.events("pool.fill_failed").length > 0, "the evil warm-up failed");
    // base was demanded too (the first create): its pool fills, the failure notwithstanding.
    await until(
      () => (node.orchestrator.status().pooledVmms ?? 0) >= 1,
      "base's pool filled",
      2_000,
    );
    const failed = node.logger.events("pool.fill_failed")[0];
    assert.equal(failed?.fields.retryInMs, 5_000, "the evil template waits before its next try");
  });
});
