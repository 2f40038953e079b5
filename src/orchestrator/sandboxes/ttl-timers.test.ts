import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { SandboxRow } from "../../catalog/index.js";
import { silentLogger } from "../../shared/index.js";
import type { LiveSandbox } from "./live-sandbox.js";
import { SandboxTable } from "./sandbox-table.js";
import { TtlTimers } from "./ttl-timers.js";

const DAY_MS = 86_400_000;

function running(id: string, endAt: number): LiveSandbox {
  const row = { id, state: "running", endAt: new Date(endAt).toISOString() } as SandboxRow;
  return { row, metrics: [] };
}

/** Mocked clock and timers; settles the promise chains a timer starts. */
function useClock(t: import("node:test").TestContext) {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"], now: Date.UTC(2030, 0, 1) });
  return async (ms: number) => {
    t.mock.timers.tick(ms);
    for (let i = 0; i < 10; i++) await Promise.resolve();
  };
}

/** Timers over a fresh table, recording which sandboxes expired. */
function useTimers() {
  const table = new SandboxTable();
  const expired: string[] = [];
  const timers = new TtlTimers({
    table,
    logger: silentLogger,
    onExpired: async (live) => void expired.push(live.row.id),
  });
  return { table, timers, expired };
}

describe("TtlTimers", () => {
  it("expires a running sandbox at its deadline, not before", async (t) => {
    const advance = useClock(t);
    const { table, timers, expired } = useTimers();
    const live = running("a", Date.now() + 5_000);
    table.add(live);
    timers.arm(live);
    await advance(4_000);
    assert.deepEqual(expired, []);
    await advance(1_000);
    assert.deepEqual(expired, ["a"]);
  });

  it("a deadline past setTimeout's range is checked again when the timer fires early", async (t) => {
    const advance = useClock(t);
    const { table, timers, expired } = useTimers();
    const live = running("long", Date.now() + 30 * DAY_MS);
    table.add(live);
    timers.arm(live);
    await advance(25 * DAY_MS); // past the 24.8-day clamp: fired, found early, re-armed
    assert.deepEqual(expired, []);
    await advance(5 * DAY_MS);
    assert.deepEqual(expired, ["long"]);
  });

  it("nothing expires that was cleared, paused, removed, or after close", async (t) => {
    const advance = useClock(t);
    const { table, timers, expired } = useTimers();
    const [cleared, paused, removed, closed] = ["c", "p", "r", "x"].map((id) => {
      const live = running(id, Date.now() + 1_000);
      table.add(live);
      timers.arm(live);
      return live as LiveSandbox;
    }) as [LiveSandbox, LiveSandbox, LiveSandbox, LiveSandbox];
    timers.clear(cleared.row.id);
    paused.row = { ...paused.row, state: "paused" };
    table.remove(removed.row.id);
    await advance(500);
    timers.close();
    timers.arm(closed);
    await advance(5_000);
    assert.deepEqual(expired, []);
  });
});
