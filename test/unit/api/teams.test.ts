// Two teams on one API: neither sees nor reaches the other's sandboxes, snapshots or
// lineage; node-wide routes need the admin token; keys are made, shown once, listed masked
// and refused at once when removed. (The InMemorySandboxService fake stands in for the node.)
import assert from "node:assert/strict";
import { test } from "node:test";
import { TeamAdmin } from "../../../src/tenancy/index.js";
import { InMemoryTeams } from "../../fakes/in-memory-teams.js";
import { TEST_ADMIN_TOKEN, testAuth } from "../../helpers/auth.js";
import { API_KEY, useApi } from "./api-harness.js";

function twoTeams() {
  const teams = new InMemoryTeams();
  const harness = useApi({ authenticate: testAuth(() => new Set([API_KEY]), teams) });
  const { service } = harness;
  const admin = new TeamAdmin(teams, {
    count: async (teamId) => service.list({ teamId }).length,
    killAll: async (teamId) => {
      for (const s of service.list({ teamId })) await service.kill(s.sandboxId);
    },
  });
  const api = useApi({
    service,
    authenticate: testAuth(() => new Set([API_KEY]), teams),
    teamAdmin: () => admin,
  });
  const asAdmin = { apiKey: null, headers: { "x-admin-token": TEST_ADMIN_TOKEN } };
  return { ...api, asAdmin };
}

test("team B's key reads team A's sandbox ids as unknown on every route, lists only its own", async () => {
  const { call, service, asAdmin } = twoTeams();
  const made = await call("POST", "/admin/teams", { ...asAdmin, body: { name: "b" } });
  assert.equal(made.statusCode, 201);
  const { apiKey: keyB, teamID: teamB } = made.json() as { apiKey: string; teamID: string };
  const a = service.seed({ sandboxId: "sbxa" }); // the default team's (API_KEY)
  const created = await call("POST", "/v2/sandboxes", { apiKey: keyB, body: {} });
  assert.equal(created.statusCode, 201);
  const b = (created.json() as { sandboxID: string }).sandboxID;
  assert.equal(service.get(b).teamId, teamB);

  const unknown = await call("GET", "/sandboxes/nosuchid", { apiKey: keyB });
  const probes: [string, string, unknown?][] = [
    ["GET", `/sandboxes/${a.sandboxId}`],
    ["DELETE", `/sandboxes/${a.sandboxId}`],
    ["POST", `/sandboxes/${a.sandboxId}/pause`, {}],
    ["POST", `/sandboxes/${a.sandboxId}/connect`, { timeout: 10 }],
    ["POST", `/sandboxes/${a.sandboxId}/resume`, {}],
    ["POST", `/sandboxes/${a.sandboxId}/timeout`, { timeout: 10 }],
    ["POST", `/sandboxes/${a.sandboxId}/refreshes`, { duration: 10 }],
    ["POST", `/sandboxes/${a.sandboxId}/fork`, { count: 1 }],
    ["POST", `/sandboxes/${a.sandboxId}/snapshots`, {}],
    ["GET", `/sandboxes/${a.sandboxId}/logs`],
    ["GET", `/v2/sandboxes/${a.sandboxId}/logs`],
    ["GET", `/sandboxes/${a.sandboxId}/metrics`],
    ["PUT", `/sandboxes/${a.sandboxId}/network`, { allowOut: [] }],
  ];
  for (const [method, url, body] of probes) {
    const res = await call(method as "GET", url, { apiKey: keyB, body });
    assert.equal(res.statusCode, 404, `${method} ${url}`);
    assert.equal(
      res.json().message.replace(a.sandboxId, "x"),
      unknown.json().message.replace("nosuchid", "x"),
    );
  }
  assert.equal(service.get(a.sandboxId).state, "running", "untouched by team B");
  assert.deepEqual(service.callsOf("kill"), []);

  const listed = (await call("GET", "/v2/sandboxes", { apiKey: keyB })).json() as {
    sandboxID: string;
  }[];
  assert.deepEqual(
    listed.map((s) => s.sandboxID),
    [b],
  );
  const listedA = (await call("GET", "/v2/sandboxes")).json() as { sandboxID: string }[];
  assert.deepEqual(
    listedA.map((s) => s.sandboxID),
    [a.sandboxId],
  );
  const all = (await call("GET", "/v2/sandboxes", asAdmin)).json() as unknown[];
  assert.equal(all.length, 2, "the admin sees every team's");
  assert.equal((await call("GET", `/sandboxes/${b}`, { apiKey: keyB })).statusCode, 200);
});

test("node-wide routes and team administration need the admin token", async () => {
  const { call, asAdmin } = twoTeams();
  for (const [method, url] of [
    ["GET", "/node"],
    ["GET", "/admin/teams"],
    ["POST", "/admin/teams"],
  ] as const) {
    const res = await call(method, url, { body: method === "POST" ? { name: "x" } : undefined });
    assert.equal(res.statusCode, 403, `${method} ${url}`);
    assert.equal(res.json().reason, "admin_required");
  }
  assert.equal((await call("GET", "/node", asAdmin)).statusCode, 200);
  const wrong = await call("GET", "/node", { apiKey: null, headers: { "x-admin-token": "nope" } });
  assert.equal(wrong.statusCode, 401);
});

test("keys: made and shown once, listed masked, refused from the next request once removed", async () => {
  const { call, asAdmin } = twoTeams();
  const made = await call("POST", "/admin/teams", {
    ...asAdmin,
    body: { name: "c", limits: { maxSandboxes: 2 } },
  });
  const { apiKey, teamID } = made.json() as { apiKey: string; teamID: string };
  assert.match(apiKey, /^e2b_[0-9a-f]{40}$/);
  const second = await call("POST", "/api-keys", { apiKey, body: { name: "ci" } });
  assert.equal(second.statusCode, 201);
  const { key, id } = second.json() as { key: string; id: string };
  const listed = (await call("GET", "/api-keys", { apiKey })).json() as Record<string, unknown>[];
  assert.equal(listed.length, 2);
  for (const row of listed) {
    assert.equal("key" in row || "hash" in row, false, "never the value or its hash");
    assert.deepEqual(Object.keys(row.mask as object).sort(), [
      "maskedValuePrefix",
      "maskedValueSuffix",
      "prefix",
      "valueLength",
    ]);
  }
  assert.equal((await call("GET", "/v2/sandboxes", { apiKey: key })).statusCode, 200);
  // Another team cannot remove it, nor see it.
  assert.equal((await call("DELETE", `/api-keys/${id}`)).statusCode, 404);
  assert.equal((await call("DELETE", `/api-keys/${id}`, { apiKey })).statusCode, 204);
  assert.equal((await call("GET", "/v2/sandboxes", { apiKey: key })).statusCode, 401);
  // Removing the team removes its keys at once.
  const removed = await call("DELETE", `/admin/teams/${teamID}`, asAdmin);
  assert.equal(removed.statusCode, 204);
  assert.equal((await call("GET", "/v2/sandboxes", { apiKey })).statusCode, 401);
});

test("limits are checked: unknown keys and negative numbers are a 400 naming the field", async () => {
  const { call, asAdmin } = twoTeams();
  const bad = await call("POST", "/admin/teams", {
    ...asAdmin,
    body: { name: "d", limits: { maxSandbox: 1 } },
  });
  assert.equal(bad.statusCode, 400);
  assert.match(bad.json().message, /limits\/maxSandbox is not a limit/);
  const negative = await call("POST", "/admin/teams", {
    ...asAdmin,
    body: { name: "d", limits: { maxVcpus: -1 } },
  });
  assert.equal(negative.statusCode, 400);
});

test("team metrics: the team's concurrency and start rate over time, its own team only", async () => {
  const { call, service, asAdmin } = twoTeams();
  const made = await call("POST", "/admin/teams", { ...asAdmin, body: { name: "m" } });
  const { apiKey, teamID } = made.json() as { apiKey: string; teamID: string };
  const one = await call("POST", "/v2/sandboxes", { apiKey, body: {} });
  await call("POST", "/v2/sandboxes", { apiKey, body: {} });
  await call("DELETE", `/sandboxes/${(one.json() as { sandboxID: string }).sandboxID}`, { apiKey });
  service.seed({ sandboxId: "other" }); // the default team's: not counted
  const start = Date.parse("2030-01-01T00:00:00.000Z") / 1000;
  const window = `start=${start}&end=${start + 60}`;
  const points = (await call("GET", `/teams/${teamID}/metrics?${window}`, { apiKey })).json() as {
    concurrentSandboxes: number;
  }[];
  assert.equal(points.at(-1)?.concurrentSandboxes, 1);
  const max = await call(
    "GET",
    `/teams/${teamID}/metrics/max?metric=concurrent_sandboxes&${window}`,
    { apiKey },
  );
  assert.equal(max.statusCode, 200);
  assert.equal((max.json() as { value: number }).value, 2);
  // Another team's metrics read as an unknown team.
  assert.equal((await call("GET", `/teams/${teamID}/metrics`)).statusCode, 404);
  const bad = await call("GET", `/teams/${teamID}/metrics/max?metric=nope`, { apiKey });
  assert.equal(bad.statusCode, 400);
});
