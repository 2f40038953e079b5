import assert from "node:assert/strict";
import { it } from "node:test";
import type { EventRow } from "../catalog/index.js";
import type { Logger } from "../shared/index.js";
import type { LifecycleEvent } from "./events.js";
import { LifecycleEvents } from "./lifecycle-events.js";

function setup(recordEvent: (event: EventRow) => Promise<void> = async () => {}) {
  const lines: { level: string; event: string; fields: Record<string, unknown> }[] = [];
  const line =
    (level: string) =>
    (fields: Record<string, unknown>, event: string): void => {
      lines.push({ level, event, fields });
    };
  const logger: Logger = {
    debug: line("debug"),
    info: line("info"),
    warn: line("warn"),
    error: line("error"),
  };
  const history: EventRow[] = [];
  const events = new LifecycleEvents({
    logger,
    catalog: {
      recordEvent: async (event) => {
        await recordEvent(event);
        history.push(event);
      },
    },
  });
  const seen: LifecycleEvent[] = [];
  events.onEvent((event) => seen.push(event));
  return { events, lines, history, seen };
}

it("writes the log line as given, records the history entry the table says, tells subscribers", async () => {
  const { events, lines, history, seen } = setup();
  const fields = { sandboxId: "sb", durationMs: 12, reboot: false };
  await events.emit("sandbox.resumed", fields);
  assert.deepEqual(lines, [{ level: "info", event: "sandbox.resumed", fields }]);
  assert.deepEqual(
    history.map(({ sandboxId, kind, detail }) => ({ sandboxId, kind, detail })),
    [{ sandboxId: "sb", kind: "sandbox.resumed", detail: { durationMs: 12 } }],
  );
  assert.deepEqual(seen, [{ name: "sandbox.resumed", fields }]);
});

it("keeps the history's own names and detail (recovered, paused without memory)", async () => {
  const { events, lines, history } = setup();
  await events.emit("sandbox.recovered_paused", {
    sandboxId: "sb",
    state: "pausing",
    snapshotId: "s1",
  });
  const timing = { pausedMs: 4, deviceStateMs: 1, memoryMs: 2, diskMs: 1, dirtyPages: 9 };
  await events.emit("sandbox.paused", { sandboxId: "sb", keepMemory: false, ...timing });
  assert.deepEqual(
    lines.map((l) => [l.level, l.event]),
    [
      ["warn", "sandbox.recovered_paused"],
      ["info", "sandbox.paused"],
    ],
  );
  assert.deepEqual(
    history.map(({ kind, detail }) => [kind, JSON.stringify(detail)]),
    [
      ["sandbox.recovered", JSON.stringify({ state: "pausing", now: "paused", snapshotId: "s1" })],
      ["sandbox.paused", JSON.stringify({ ...timing, keepMemory: false })],
    ],
  );
});

it("records every history entry with the kind and detail GET /sandboxes/{id}/logs shows", async () => {
  const { events, history } = setup();
  const timing = { pausedMs: 4, deviceStateMs: 1, memoryMs: 2, diskMs: 1, dirtyPages: 9 };
  const sandboxId = "sb";
  await events.emit("sandbox.created", { sandboxId, snapshotId: "s", from: "fork", durationMs: 7 });
  await events.emit("sandbox.paused", { sandboxId, keepMemory: true, ...timing });
  await events.emit("sandbox.resumed", { sandboxId, durationMs: 5, reboot: true });
  const fork = { sandboxId, snapshotId: "f", count: 3, started: 2, durationMs: 9 };
  await events.emit("sandbox.forked", { ...fork, spilled: 0 });
  await events.emit("sandbox.forked", { ...fork, spilled: 1 });
  await events.emit("sandbox.snapshotted", {
    sandboxId,
    template: "t",
    kind: "snapshot",
    snapshotId: "n",
  });
  await events.emit("sandbox.network_updated", { sandboxId, allowOut: ["1.1.1.1"], denyOut: [] });
  await events.emit("sandbox.lost", { sandboxId, state: "resuming" });
  await events.emit("sandbox.killed", { sandboxId, reason: "timeout" });
  assert.deepEqual(
    history.map(({ sandboxId, kind, detail }) => `${sandboxId} ${kind} ${JSON.stringify(detail)}`),
    [
      'sb sandbox.created {"durationMs":7,"snapshotId":"s"}',
      `sb sandbox.paused ${JSON.stringify(timing)}`,
      'sb sandbox.resumed {"durationMs":5,"reboot":true}',
      'sb sandbox.forked {"snapshotId":"f","count":3,"started":2}',
      'sb sandbox.forked {"snapshotId":"f","count":3,"started":2,"spilled":1}',
      'sb sandbox.snapshotted {"template":"t","snapshotId":"n"}',
      'sb sandbox.network_updated {"allowOut":["1.1.1.1"],"denyOut":[]}',
      'sb sandbox.lost {"state":"resuming"}',
      'sb sandbox.killed {"reason":"timeout"}',
    ],
  );
});

it("logs nothing for a history-only event, and records nothing for a log-only one", async () => {
  const { events, lines, history, seen } = setup();
  await events.emit("sandbox.snapshotted", {
    sandboxId: "sb",
    template: "t",
    kind: "snapshot",
    snapshotId: "s",
  });
  const returned = events.emit("pool.vmm_warmed", { snapshotId: "s", durationMs: 3 });
  assert.equal(returned, undefined, "nothing to wait for");
  assert.deepEqual(
    lines.map((l) => l.event),
    ["pool.vmm_warmed"],
  );
  assert.deepEqual(
    history.map((h) => h.kind),
    ["sandbox.snapshotted"],
  );
  assert.equal(seen.length, 2);
});

it("never fails the operation: a failed record and a failing subscriber are logged", async () => {
  const { events, lines } = setup(async () => {
    throw new Error("disk on fire");
  });
  events.onEvent(() => {
    throw new Error("bad subscriber");
  });
  await events.emit("sandbox.killed", { sandboxId: "sb", reason: "killed" });
  assert.deepEqual(
    lines.map((l) => [l.level, l.event]),
    [
      ["info", "sandbox.killed"],
      ["error", "events.listener_failed"],
      ["warn", "catalog.event_failed"],
    ],
  );
  assert.equal(lines[2]?.fields.kind, "sandbox.killed");
});

/** Never run: `npm run lint` (tsc) checks that each of these is refused, or accepted. */
export function typeChecks(events: LifecycleEvents): Promise<void>[] {
  // @ts-expect-error: no such event
  events.emit("sandbox.renamed", { sandboxId: "sb" });
  // @ts-expect-error: durationMs is missing
  events.emit("pool.vmm_warmed", { snapshotId: "s" });
  // @ts-expect-error: pooled is a boolean
  events.emit("sandbox.creating", { sandboxId: "sb", snapshotId: "s", pooled: "yes" });
  // @ts-expect-error: a field the event does not have
  events.emit("pool.forgotten", { snapshotId: "s", sandboxId: "sb" });
  // A history event is waited for; the others return nothing to wait for.
  const recorded: Promise<void> = events.emit("sandbox.lost", {
    sandboxId: "sb",
    state: "running",
  });
  // @ts-expect-error: not a promise
  const notRecorded: Promise<void> = events.emit("pool.forgotten", { snapshotId: "s" });
  return [recorded, notRecorded];
}

it("marks the entries that are E2B lifecycle events with their type, and only those", async () => {
  const { events, history } = setup();
  const timing = { pausedMs: 4, deviceStateMs: 1, memoryMs: 2, diskMs: 1, dirtyPages: 9 };
  await events.emit("sandbox.created", {
    sandboxId: "sb",
    snapshotId: "s0",
    from: "template",
    durationMs: 5,
  });
  await events.emit("sandbox.timeout_set", { sandboxId: "sb", endAt: "2030-01-01T00:00:00.000Z" });
  await events.emit("sandbox.paused", { sandboxId: "sb", keepMemory: true, ...timing });
  const snapshotted = { sandboxId: "sb", template: "t", snapshotId: "s1" };
  await events.emit("sandbox.snapshotted", { ...snapshotted, kind: "snapshot" });
  await events.emit("sandbox.snapshotted", { ...snapshotted, kind: "layer" });
  await events.emit("sandbox.reattached", { sandboxId: "sb", pid: 7, durationMs: 3 });
  await events.emit("sandbox.lost", { sandboxId: "sb", state: "running" });
  assert.deepEqual(
    history.map(({ kind, lifecycle }) => [kind, lifecycle]),
    [
      ["sandbox.created", "sandbox.lifecycle.created"],
      ["sandbox.timeout_set", "sandbox.lifecycle.updated"],
      ["sandbox.paused", "sandbox.lifecycle.paused"],
      ["sandbox.snapshotted", "sandbox.lifecycle.checkpointed"],
      ["sandbox.snapshotted", undefined],
      ["sandbox.reattached", undefined],
      ["sandbox.lost", "sandbox.lifecycle.killed"],
    ],
  );
  assert.ok(!("lifecycle" in (history[4] as object)), "no key at all when it is none");
});
