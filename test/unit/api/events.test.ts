// GET /events/sandboxes and /events/sandboxes/:id on the stand-in service: E2B's body, its
// query parameters (defaults, bounds, repeated `types`), the caller's team passed down.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { LifecycleEventRow } from "../../../src/catalog/index.js";
import { errorOf, useApi } from "./api-harness.js";

const STARTED = "2030-01-01T00:00:00.000Z";

function row(
  second: number,
  lifecycle: string,
  over: Partial<LifecycleEventRow> = {},
): LifecycleEventRow {
  return {
    id: `00000000-0000-4000-8000-${String(second).padStart(12, "0")}`,
    at: `2030-01-01T00:00:${String(second).padStart(2, "0")}.000Z`,
    lifecycle,
    kind: "sandbox.x",
    sandbox: {
      id: "sb1",
      teamId: "default",
      templateId: "base",
      metadata: { run: "r7" },
      startedAt: STARTED,
      vcpus: 2,
      memoryMiB: 512,
      snapshotId: "snap-9",
    },
    ...over,
  };
}

test("lists the team's events in E2B's shape, newest first, 10 by default", async () => {
  const { call, service } = useApi();
  service.lifecycleEventRows = [
    row(1, "sandbox.lifecycle.created", { detail: { snapshotId: "snap-base" } }),
    row(2, "sandbox.lifecycle.updated", { detail: { endAt: "2030-01-01T01:00:00.000Z" } }),
    row(5, "sandbox.lifecycle.killed", { detail: { reason: "killed" } }),
    ...Array.from({ length: 12 }, (_, i) =>
      row(10 + i, "sandbox.lifecycle.created", {
        sandbox: { ...row(0, "").sandbox, id: `other${i}`, teamId: "team-b" },
      }),
    ),
  ];
  const res = await call("GET", "/events/sandboxes");
  assert.equal(res.statusCode, 200, res.body);
  const events = res.json() as Record<string, unknown>[];
  assert.deepEqual(
    events.map((e) => e.type),
    ["sandbox.lifecycle.killed", "sandbox.lifecycle.updated", "sandbox.lifecycle.created"],
    "the caller's team only, newest first",
  );
  assert.deepEqual(events[0], {
    id: "00000000-0000-4000-8000-000000000005",
    version: "v2",
    type: "sandbox.lifecycle.killed",
    eventCategory: "lifecycle",
    eventLabel: "kill",
    eventData: {
      sandbox_metadata: { run: "r7" },
      kill_reason: "killed",
      execution: { started_at: STARTED, vcpu_count: 2, memory_mb: 512, execution_time: 5000 },
    },
    timestamp: "2030-01-01T00:00:05.000Z",
    sandboxId: "sb1",
    sandboxExecutionId: "sb1",
    sandboxTemplateId: "base",
    sandboxBuildId: "snap-9",
    sandboxTeamId: "default",
  });
  assert.deepEqual(events[1]?.eventData, {
    sandbox_metadata: { run: "r7" },
    set_timeout: "2030-01-01T01:00:00.000Z",
  });
  assert.equal(events[2]?.sandboxBuildId, "snap-base", "the snapshot it was created from");
  assert.deepEqual(service.callsOf("lifecycleEvents")[0], [
    { teamId: "default", types: [], offset: 0, limit: 10, ascending: false },
  ]);
});

test("takes offset, limit, orderAsc and repeated types; one sandbox's by its route", async () => {
  const { call, service } = useApi();
  service.lifecycleEventRows = [
    row(1, "sandbox.lifecycle.created"),
    row(2, "sandbox.lifecycle.paused"),
    row(3, "sandbox.lifecycle.resumed"),
  ];
  const types = "types=sandbox.lifecycle.paused&types=sandbox.lifecycle.created";
  const res = await call("GET", `/events/sandboxes/sb1?orderAsc=true&offset=1&limit=1&${types}`);
  assert.equal(res.statusCode, 200, res.body);
  assert.deepEqual(
    (res.json() as { type: string }[]).map((e) => e.type),
    ["sandbox.lifecycle.paused"],
  );
  assert.deepEqual(service.callsOf("lifecycleEvents")[0], [
    {
      teamId: "default",
      sandboxId: "sb1",
      types: ["sandbox.lifecycle.paused", "sandbox.lifecycle.created"],
      offset: 1,
      limit: 1,
      ascending: true,
    },
  ]);
  const one = await call("GET", "/events/sandboxes?types=sandbox.lifecycle.resumed");
  assert.deepEqual(
    (one.json() as { type: string }[]).map((e) => e.type),
    ["sandbox.lifecycle.resumed"],
  );
  assert.deepEqual(await (await call("GET", "/events/sandboxes/nosuch")).json(), []);
});

test("bad query values are 400s naming the parameter; no key is 401", async () => {
  const { call } = useApi();
  const cases: [string, RegExp][] = [
    ["limit=0", /^querystring\/limit must be between 1 and 100/],
    ["limit=101", /^querystring\/limit must be between 1 and 100/],
    ["offset=-1", /^querystring\/offset must be a non-negative integer/],
    ["orderAsc=yes", /^querystring\/orderAsc must be true or false/],
    [
      "types=sandbox.lifecycle.exploded",
      /^querystring\/types has unknown type "sandbox\.lifecycle\.exploded"/,
    ],
  ];
  for (const [query, message] of cases) {
    const res = await call("GET", `/events/sandboxes?${query}`);
    assert.equal(res.statusCode, 400, query);
    assert.match(errorOf(res).message, message, query);
  }
  const bad = await call("GET", "/events/sandboxes/NOT-AN-ID");
  assert.equal(bad.statusCode, 404);
  assert.equal((await call("GET", "/events/sandboxes", { apiKey: null })).statusCode, 401);
});
