// What every GuestAgent must do, seen through the interface: reaching a guest's agent (or
// giving up on one that never answers, at its deadline, when its VM exits, or when the
// caller aborts), /init and the access token it sets, and the token-guarded calls: metrics,
// logs, the warm-up walk, sync. Runs on FakeGuestAgent in the unit tier
// (test/unit/contracts/) and on EnvdClient against the real envd in the e2e tier
// (test/e2e/agent/guest-agent-contract.test.ts).
import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import type { GuestAgent } from "../../src/orchestrator/index.js";
import { WarrenError } from "../../src/shared/index.js";

/** What an implementation's test file hands the suite. */
export interface GuestAgentHarness {
  readonly agent: GuestAgent;
  /** Starts a fresh guest (its agent holds no token yet); returns the address it answers at. */
  guest(): Promise<string>;
  /** An address where no agent answers (a guest that is not running). */
  silentHost(): Promise<string>;
  cleanup(): Promise<void>;
}

/** Generous: a loaded host may be slow to answer a guest that is there. */
const DEADLINE_MS = 20_000;

const reason = (expected: string) => (err: unknown) => {
  assert.ok(err instanceof WarrenError, String(err));
  assert.equal(err.reason, expected, err.message);
  return true;
};

/** Asserts `call` rejects in well under `DEADLINE_MS`: a refusal, not a timeout. */
async function refusedAtOnce(call: Promise<unknown>): Promise<void> {
  const started = performance.now();
  await assert.rejects(call, WarrenError);
  const ms = performance.now() - started;
  assert.ok(ms < DEADLINE_MS / 2, `refused after ${Math.round(ms)} ms`);
}

/** Registers the suite; `open` is called once per test. */
export function guestAgentContract(name: string, open: () => Promise<GuestAgentHarness>): void {
  async function use(t: TestContext): Promise<GuestAgentHarness> {
    const harness = await open();
    t.after(() => harness.cleanup());
    return harness;
  }

  describe(`GuestAgent contract: ${name}`, () => {
    it("waits for a guest's agent to answer", async (t) => {
      const { agent, guest } = await use(t);
      await agent.waitForHealth(await guest(), { deadlineMs: DEADLINE_MS });
    });

    it("gives up on a guest that never answers at the deadline (guest_unavailable)", async (t) => {
      const { agent, silentHost } = await use(t);
      const host = await silentHost();
      const started = performance.now();
      await assert.rejects(
        agent.waitForHealth(host, { deadlineMs: 300 }),
        reason("guest_unavailable"),
      );
      await assert.rejects(agent.init(host, {}, { deadlineMs: 300 }), reason("guest_unavailable"));
      assert.ok(performance.now() - started >= 600, "each waited its deadline");
    });

    it("stops waiting for health when the guest's VM exits, and at once when aborted", async (t) => {
      const { agent, silentHost } = await use(t);
      const host = await silentHost();
      await refusedAtOnce(
        agent.waitForHealth(host, { deadlineMs: DEADLINE_MS, exited: Promise.resolve() }),
      );
      const aborted = AbortSignal.abort();
      await assert.rejects(
        agent.init(host, {}, { deadlineMs: DEADLINE_MS, signal: aborted }),
        (err: unknown) => (err as Error).name === "AbortError",
      );
      await assert.rejects(
        agent.waitForHealth(host, { deadlineMs: DEADLINE_MS, signal: aborted }),
        (err: unknown) => (err as Error).name === "AbortError",
      );
    });

    it("sets the access token at /init; later calls must prove it, in the header or the body", async (t) => {
      const { agent, guest } = await use(t);
      const host = await guest();
      await agent.init(
        host,
        { accessToken: "tok-1", envVars: { A: "1" } },
        { deadlineMs: DEADLINE_MS },
      );
      await refusedAtOnce(agent.init(host, { envVars: { B: "2" } }, { deadlineMs: DEADLINE_MS }));
      await refusedAtOnce(agent.init(host, {}, { token: "wrong", deadlineMs: DEADLINE_MS }));
      // Proven by the header; a body without accessToken keeps the token.
      await agent.init(host, { envVars: { B: "2" } }, { token: "tok-1", deadlineMs: DEADLINE_MS });
      await refusedAtOnce(agent.init(host, {}, { deadlineMs: DEADLINE_MS }));
      // Proven by the body's own accessToken (a restore's /init carries the captured one).
      await agent.init(host, { accessToken: "tok-1" }, { deadlineMs: DEADLINE_MS });
      // And replaced: the old one no longer opens anything. (envd ignores an /init stamped no
      // later than the last one it took: a millisecond apart at least.)
      await new Promise((resolve) => setTimeout(resolve, 5));
      await agent.init(host, { accessToken: "tok-2" }, { token: "tok-1", deadlineMs: DEADLINE_MS });
      await refusedAtOnce(agent.metrics(host, "tok-1"));
      await agent.metrics(host, "tok-2");
    });

    it("samples metrics as numbers, with the token", async (t) => {
      const { agent, guest } = await use(t);
      const host = await guest();
      await agent.init(host, { accessToken: "tok" }, { deadlineMs: DEADLINE_MS });
      const metrics = await agent.metrics(host, "tok");
      for (const [key, value] of Object.entries(metrics))
        assert.ok(typeof value === "number" && Number.isFinite(value), `${key}: ${value}`);
      assert.ok(metrics.cpu_count >= 1);
      assert.ok(metrics.mem_total > 0 && metrics.mem_used <= metrics.mem_total);
      await refusedAtOnce(agent.metrics(host));
    });

    it("reads the agent's log lines after a seq, oldest first, with the token", async (t) => {
      const { agent, guest } = await use(t);
      const host = await guest();
      await agent.init(host, { accessToken: "tok" }, { deadlineMs: DEADLINE_MS });
      const lines = await agent.logs(host, "tok", 0);
      let last = 0;
      for (const line of lines) {
        assert.ok(line.seq > last, `seq ${line.seq} after ${last}`);
        assert.ok(["info", "warn", "error"].includes(line.level));
        assert.equal(typeof line.message, "string");
        assert.ok(Number.isFinite(line.timestamp));
        last = line.seq;
      }
      assert.ok((await agent.logs(host, "tok", last)).every((line) => line.seq > last));
      await refusedAtOnce(agent.logs(host, undefined, 0));
    });

    it("walks the agent's hot paths and syncs the guest, with the token", async (t) => {
      const { agent, guest } = await use(t);
      const host = await guest();
      await agent.exercise(host);
      await agent.init(host, { accessToken: "tok" }, { deadlineMs: DEADLINE_MS });
      await agent.exercise(host, "tok");
      await agent.sync(host, "tok");
      await refusedAtOnce(agent.exercise(host));
    });
  });
}
