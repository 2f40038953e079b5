import assert from "node:assert/strict";
import { test } from "node:test";
import type { SandboxLogEntry } from "../../../src/orchestrator/index.js";
import { errorOf, useApi } from "./api-harness.js";

const MASK = "localhost:${PORT}";

// One sandbox: get, kill, pause, resume, connect, timeout, refreshes, metrics, logs, network.

test("GET /sandboxes/:id: the SandboxDetail fields the SDK's getInfo reads", async () => {
  const { call, service } = useApi({ domain: "example.test" });
  const info = service.seed({
    sandboxId: "abc",
    alias: "py",
    metadata: { k: "v" },
    envdAccessToken: "tok",
    network: {
      allowOut: ["1.1.1.1"],
      denyOut: ["0.0.0.0/0"],
      allowPublicTraffic: false,
      maskRequestHost: MASK,
    },
    allowInternetAccess: false,
    lifecycle: { onTimeout: "pause", autoResume: true },
    state: "paused",
  });
  const res = await call("GET", "/sandboxes/abc");
  assert.equal(res.statusCode, 200);
  assert.deepEqual(res.json(), {
    sandboxID: "abc",
    templateID: "base",
    alias: "py",
    clientID: "warren",
    state: "paused",
    startedAt: info.startedAt.toISOString(),
    endAt: info.endAt.toISOString(),
    cpuCount: 2,
    memoryMB: 512,
    diskSizeMB: 2048,
    envdVersion: "0.6.4",
    volumeMounts: [],
    metadata: { k: "v" },
    envdAccessToken: "tok",
    domain: "example.test",
    allowInternetAccess: false,
    network: {
      allowOut: ["1.1.1.1"],
      denyOut: ["0.0.0.0/0"],
      allowPublicTraffic: false,
      maskRequestHost: MASK,
    },
    lifecycle: { onTimeout: "pause", autoResume: true },
  });
  assert.match(res.json().startedAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);

  const missing = await call("GET", "/sandboxes/nope");
  assert.equal(missing.statusCode, 404);
  assert.equal(errorOf(missing).code, 404); // the SDK checks the body's code
});

test("DELETE: 204, then a 404 body (the SDK's kill() returns false)", async () => {
  const { call, service } = useApi();
  service.seed({ sandboxId: "abc" });
  const first = await call("DELETE", "/sandboxes/abc");
  assert.equal(first.statusCode, 204);
  assert.equal(first.body, "");
  const second = await call("DELETE", "/sandboxes/abc");
  assert.equal(second.statusCode, 404);
  assert.equal(errorOf(second).code, 404);
  // The second never reaches kill: the id is no longer one of the caller's sandboxes.
  assert.deepEqual(service.callsOf("kill"), [["abc"]]);
});

test("pause: 204, then 409 when already paused; empty and SDK-style bodies both work", async () => {
  const { call, service } = useApi();
  service.seed({ sandboxId: "abc" });
  assert.equal((await call("POST", "/sandboxes/abc/pause", { body: {} })).statusCode, 204);
  const again = await call("POST", "/sandboxes/abc/pause");
  assert.equal(again.statusCode, 409);
  assert.equal(errorOf(again).code, 409);

  service.seed({ sandboxId: "def" });
  const emptyJson = await call("POST", "/sandboxes/def/pause", {
    body: "",
    headers: { "content-type": "application/json" },
  });
  assert.equal(emptyJson.statusCode, 204);

  const notObject = await call("POST", "/sandboxes/def/pause", {
    body: "[1]",
    headers: { "content-type": "application/json" },
  });
  assert.equal(errorOf(notObject).message, "body must be object or null");

  service.seed({ sandboxId: "ghi" });
  // Filesystem only (the SDK's pause({ keepMemory: false })).
  const memoryless = await call("POST", "/sandboxes/ghi/pause", { body: { memory: false } });
  assert.equal(memoryless.statusCode, 204);
  assert.deepEqual(service.callsOf("pause"), [
    ["abc"],
    ["abc"],
    ["def"],
    ["ghi", { keepMemory: false }],
  ]);
});

test("connect: 200 when it was running, 201 when it was resumed; timeout in seconds", async () => {
  const { call, service } = useApi();
  service.seed({ sandboxId: "abc" });

  const running = await call("POST", "/v2/sandboxes/abc/connect", { body: { timeout: 60 } });
  assert.equal(running.statusCode, 200);
  assert.equal(running.json().sandboxID, "abc");
  assert.equal(running.json().envdVersion, "0.6.4");

  await call("POST", "/sandboxes/abc/pause");
  const resumed = await call("POST", "/v2/sandboxes/abc/connect", { body: {} });
  assert.equal(resumed.statusCode, 201);

  const v1 = await call("POST", "/sandboxes/abc/connect", { body: { timeout: 10 } });
  assert.equal(v1.statusCode, 200);
  const v2NoBody = await call("POST", "/v2/sandboxes/abc/connect");
  assert.equal(v2NoBody.statusCode, 200);
  // The SDK's onResume: 'reboot'.
  await call("POST", "/v2/sandboxes/abc/connect", { body: { memory: false } });

  assert.deepEqual(service.callsOf("connect"), [
    ["abc", 60_000],
    ["abc", undefined],
    ["abc", 10_000],
    ["abc", undefined],
    ["abc", undefined, { reboot: true }],
  ]);

  const v1NoTimeout = await call("POST", "/sandboxes/abc/connect", { body: {} });
  assert.equal(v1NoTimeout.statusCode, 400);
  assert.equal(errorOf(v1NoTimeout).message, "body must have required property 'timeout'");
  const badTimeout = await call("POST", "/v2/sandboxes/abc/connect", { body: { timeout: "60" } });
  assert.equal(errorOf(badTimeout).message, "body/timeout must be integer");
  const missing = await call("POST", "/v2/sandboxes/zzz/connect", { body: {} });
  assert.equal(missing.statusCode, 404);
  errorOf(missing);
});

test("resume (deprecated): 201 Sandbox, 409 when running", async () => {
  const { call, service } = useApi();
  service.seed({ sandboxId: "abc", state: "paused" });
  const res = await call("POST", "/sandboxes/abc/resume", {
    body: { timeout: 120, autoPause: true },
  });
  assert.equal(res.statusCode, 201);
  assert.equal(res.json().sandboxID, "abc");
  const again = await call("POST", "/sandboxes/abc/resume", { body: {} });
  assert.equal(again.statusCode, 409);
  assert.deepEqual(service.callsOf("resume"), [
    ["abc", 120_000, true],
    ["abc", undefined, undefined],
  ]);
});

test("timeout and refreshes: seconds → ms, 204, validated", async () => {
  const { call, service } = useApi({ defaultTimeoutMs: 45_000, maxTimeoutMs: 600_000 });
  service.seed({ sandboxId: "abc" });
  assert.equal(
    (await call("POST", "/sandboxes/abc/timeout", { body: { timeout: 5 } })).statusCode,
    204,
  );
  service.seed({ sandboxId: "zero" });
  assert.equal(
    (await call("POST", "/sandboxes/zero/timeout", { body: { timeout: 0 } })).statusCode,
    204,
    "0 (E2B's minimum): the sandbox ends now",
  );
  assert.deepEqual(service.callsOf("setTimeout"), [
    ["abc", 5000],
    ["zero", 0],
  ]);

  const cases: [unknown, string][] = [
    [{}, "body must have required property 'timeout'"],
    [{ timeout: "5" }, "body/timeout must be integer"],
    [{ timeout: -1 }, "body/timeout must be 0 or more (seconds)"],
    [{ timeout: 601 }, "body/timeout must be at most 600 (seconds)"],
  ];
  for (const [body, message] of cases) {
    const res = await call("POST", "/sandboxes/abc/timeout", { body });
    assert.equal(res.statusCode, 400);
    assert.equal(errorOf(res).message, message);
  }
  const unknown = await call("POST", "/sandboxes/zzz/timeout", { body: { timeout: 5 } });
  assert.equal(unknown.statusCode, 404);

  assert.equal(
    (await call("POST", "/sandboxes/abc/refreshes", { body: { duration: 30 } })).statusCode,
    204,
  );
  assert.equal((await call("POST", "/sandboxes/abc/refreshes")).statusCode, 204);
  assert.deepEqual(service.callsOf("refresh"), [
    ["abc", 30_000],
    ["abc", 45_000],
  ]);
  const badDuration = await call("POST", "/sandboxes/abc/refreshes", { body: { duration: 1.5 } });
  assert.equal(errorOf(badDuration).message, "body/duration must be integer");
});

test("GET /sandboxes/metrics: each named sandbox's latest sample, only the caller's own", async () => {
  const { call, service } = useApi();
  service.seed({ sandboxId: "abc" });
  service.seed({ sandboxId: "xyz", teamId: "another" });
  const sample = (msAgo: number, cpuUsedPct: number) => ({
    timestamp: new Date(Date.now() - msAgo),
    cpuCount: 2,
    cpuUsedPct,
    memUsed: 100,
    memTotal: 200,
    memCache: 10,
    diskUsed: 300,
    diskTotal: 400,
  });
  service.metricSamples = [sample(2000, 10), sample(1000, 20)];
  const res = await call("GET", "/sandboxes/metrics?sandbox_ids=abc,xyz,missing,NOT-AN-ID,abc");
  assert.equal(res.statusCode, 200);
  const body = res.json() as { sandboxes: Record<string, { cpuUsedPct: number }> };
  assert.deepEqual(Object.keys(body.sandboxes), ["abc"], "another team's and unknown ids left out");
  assert.equal(body.sandboxes.abc?.cpuUsedPct, 20, "the latest sample");
  assert.equal(service.callsOf("metrics").filter(([id]) => id === "xyz").length, 0);

  for (const [query, message] of [
    ["", "querystring must have required property 'sandbox_ids'"],
    ["?sandbox_ids=,", "querystring/sandbox_ids must name a sandbox"],
    [
      `?sandbox_ids=${Array.from({ length: 101 }, (_, i) => `s${i}`).join(",")}`,
      "querystring/sandbox_ids must name at most 100 sandboxes",
    ],
  ]) {
    const bad = await call("GET", `/sandboxes/metrics${query}`);
    assert.equal(bad.statusCode, 400, query);
    assert.equal(errorOf(bad).message, message);
  }
});

test("metrics: unix-second window → Dates; ISO and unix timestamps out", async () => {
  const { call, service } = useApi();
  service.seed({ sandboxId: "abc" });
  const at = new Date("2030-01-01T00:00:10.700Z");
  service.metricSamples = [
    {
      timestamp: at,
      cpuCount: 2,
      cpuUsedPct: 12.5,
      memUsed: 100,
      memTotal: 200,
      memCache: 10,
      diskUsed: 300,
      diskTotal: 400,
    },
  ];
  const start = Date.parse("2030-01-01T00:00:00Z") / 1000;
  const res = await call("GET", `/sandboxes/abc/metrics?start=${start}&end=${start + 60}`);
  assert.equal(res.statusCode, 200);
  assert.deepEqual(res.json(), [
    {
      timestamp: "2030-01-01T00:00:10.700Z",
      timestampUnix: start + 10,
      cpuCount: 2,
      cpuUsedPct: 12.5,
      memUsed: 100,
      memTotal: 200,
      memCache: 10,
      diskUsed: 300,
      diskTotal: 400,
    },
  ]);
  assert.deepEqual(service.callsOf("metrics")[0], [
    "abc",
    { start: new Date(start * 1000), end: new Date((start + 60) * 1000) },
  ]);

  // A window before the sandbox existed is empty, not an error.
  const early = await call("GET", `/sandboxes/abc/metrics?start=${start - 100}&end=${start - 50}`);
  assert.deepEqual(early.json(), []);

  const all = await call("GET", "/sandboxes/abc/metrics");
  assert.equal(all.json().length, 1);
  assert.deepEqual(service.callsOf("metrics").at(-1), ["abc", {}]);

  for (const q of ["start=abc", "start=-1", "start=1.5", `start=${start}&end=${start - 1}`]) {
    const bad = await call("GET", `/sandboxes/abc/metrics?${q}`);
    assert.equal(bad.statusCode, 400, q);
    assert.match(errorOf(bad).message, /^querystring\/start /);
  }
});

test("logs: v1 (logs + logEntries) and v2 (cursor, direction, level, search)", async () => {
  const { call, service } = useApi();
  service.seed({ sandboxId: "abc" });
  const entry = (s: number, level: SandboxLogEntry["level"], message: string): SandboxLogEntry => ({
    timestamp: new Date(Date.UTC(2030, 0, 1, 0, 0, s)),
    level,
    message,
    source: "lifecycle",
  });
  service.logEntries = [
    entry(1, "info", "created"),
    entry(2, "debug", "booted in 80ms"),
    entry(3, "warn", "disk almost full"),
    entry(4, "error", "oom killed"),
  ];
  const ms = (s: number) => Date.UTC(2030, 0, 1, 0, 0, s);

  const v1 = await call("GET", `/sandboxes/abc/logs?start=${ms(2)}&limit=2`);
  assert.equal(v1.statusCode, 200);
  assert.deepEqual(v1.json(), {
    logs: [
      { timestamp: "2030-01-01T00:00:02.000Z", line: "booted in 80ms" },
      { timestamp: "2030-01-01T00:00:03.000Z", line: "disk almost full" },
    ],
    logEntries: [
      {
        timestamp: "2030-01-01T00:00:02.000Z",
        level: "debug",
        message: "booted in 80ms",
        fields: { source: "lifecycle" },
      },
      {
        timestamp: "2030-01-01T00:00:03.000Z",
        level: "warn",
        message: "disk almost full",
        fields: { source: "lifecycle" },
      },
    ],
  });
  assert.deepEqual(service.callsOf("logs")[0], ["abc", { start: new Date(ms(2)), limit: 2 }]);

  const messages = async (query: string) => {
    const res = await call("GET", `/v2/sandboxes/abc/logs?${query}`);
    assert.equal(res.statusCode, 200, res.body);
    return res.json().logs.map((e: { message: string }) => e.message);
  };
  assert.deepEqual(await messages(""), [
    "created",
    "booted in 80ms",
    "disk almost full",
    "oom killed",
  ]);
  assert.deepEqual(await messages(`cursor=${ms(3)}`), ["disk almost full", "oom killed"]);
  assert.deepEqual(await messages(`cursor=${ms(3)}&direction=backward&limit=2`), [
    "disk almost full",
    "booted in 80ms",
  ]);
  assert.deepEqual(await messages("level=warn"), ["disk almost full", "oom killed"]);
  assert.deepEqual(await messages("search=oo"), ["booted in 80ms", "oom killed"]);

  const bad = await call("GET", "/v2/sandboxes/abc/logs?level=loud");
  assert.equal(bad.statusCode, 400);
  assert.match(errorOf(bad).message, /^querystring\/level /);
});

test("PUT network: replace-all, omitted lists cleared, 204", async () => {
  const { call, service } = useApi();
  service.seed({ sandboxId: "abc" });
  const res = await call("PUT", "/sandboxes/abc/network", {
    body: { allowOut: ["8.8.8.8/32"], allow_internet_access: false },
  });
  assert.equal(res.statusCode, 204);
  assert.equal((await call("PUT", "/sandboxes/abc/network", { body: {} })).statusCode, 204);
  const ruled = await call("PUT", "/sandboxes/abc/network", {
    body: { rules: { "API.A.com": [{ transform: { headers: { x: "${e2b.secrets.k}" } } }] } },
  });
  assert.equal(ruled.statusCode, 204);
  assert.deepEqual(service.callsOf("updateNetwork"), [
    ["abc", { allowOut: ["8.8.8.8/32"], denyOut: [], allowInternetAccess: false }],
    ["abc", { allowOut: [], denyOut: [] }],
    [
      "abc",
      {
        allowOut: [],
        denyOut: [],
        rules: { "api.a.com": [{ transform: { headers: { x: "${e2b.secrets.k}" } } }] },
      },
    ],
  ]);

  const bad = await call("PUT", "/sandboxes/abc/network", { body: { denyOut: "0.0.0.0/0" } });
  assert.equal(bad.statusCode, 400);
  assert.equal(errorOf(bad).message, "body/denyOut must be array");
  const rules = await call("PUT", "/sandboxes/abc/network", {
    body: { rules: { "a.com": [{ transform: { headers: { "content-length": "1" } } }] } },
  });
  assert.equal(rules.statusCode, 400);
  assert.match(errorOf(rules).message, /content-length cannot be set/);
  const missing = await call("PUT", "/sandboxes/zzz/network", { body: {} });
  assert.equal(missing.statusCode, 404);
});
