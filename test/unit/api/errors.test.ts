import assert from "node:assert/strict";
import { test } from "node:test";
import { WarrenError } from "../../../src/shared/errors.js";
import { TEST_ADMIN_TOKEN, testAuth } from "../../helpers/auth.js";
import { API_KEY, errorOf, useApi } from "./api-harness.js";

const asAdmin = { apiKey: null, headers: { "x-admin-token": TEST_ADMIN_TOKEN } };

// Auth, readiness, and the rule that every error is E2B's {code, message} JSON.

test("auth: missing and wrong keys are 401, the right key passes, in either header", async () => {
  const { call, service } = useApi();
  service.seed({ sandboxId: "abc" });

  const missing = await call("GET", "/sandboxes/abc", { apiKey: null });
  assert.equal(missing.statusCode, 401);
  assert.match(errorOf(missing).message, /API key/);

  const wrong = await call("GET", "/sandboxes/abc", { apiKey: "e2b_wrong" });
  assert.equal(wrong.statusCode, 401);
  assert.equal(errorOf(wrong).message, "invalid API key");

  assert.equal((await call("GET", "/sandboxes/abc")).statusCode, 200);
  const upper = await call("GET", "/sandboxes/abc", {
    apiKey: null,
    headers: { "X-API-KEY": API_KEY },
  });
  assert.equal(upper.statusCode, 200);
  const bearer = await call("GET", "/sandboxes/abc", {
    apiKey: null,
    headers: { authorization: `Bearer ${API_KEY}` },
  });
  assert.equal(bearer.statusCode, 200);
  const badBearer = await call("GET", "/sandboxes/abc", {
    apiKey: null,
    headers: { authorization: "Bearer nope" },
  });
  assert.equal(badBearer.statusCode, 401);
});

test("auth: 401 comes before body errors and no service call is made", async () => {
  const { call, service } = useApi();
  const res = await call("POST", "/v2/sandboxes", { apiKey: "nope", body: { timeout: "x" } });
  assert.equal(res.statusCode, 401);
  assert.deepEqual(service.calls, []);
});

test("auth: keys are read per request (rotation without restart)", async () => {
  let keys = new Set(["old"]);
  const { call } = useApi({ authenticate: testAuth(() => keys) });
  assert.equal((await call("GET", "/v2/sandboxes", { apiKey: "old" })).statusCode, 200);
  keys = new Set(["new"]);
  assert.equal((await call("GET", "/v2/sandboxes", { apiKey: "old" })).statusCode, 401);
  assert.equal((await call("GET", "/v2/sandboxes", { apiKey: "new" })).statusCode, 200);
});

test("/health needs no key and answers while starting; API routes are 503 until ready", async () => {
  const { call, service } = useApi();
  service.serverStatus = { phase: "starting", accelerator: "tcg", message: "building base" };

  const health = await call("GET", "/health", { apiKey: null });
  assert.equal(health.statusCode, 200);
  assert.deepEqual(health.json(), { status: "starting" });
  assert.deepEqual((await call("GET", "/health", asAdmin)).json(), {
    status: "starting",
    accelerator: "tcg",
    message: "building base",
  });

  for (const [method, url] of [
    ["GET", "/v2/sandboxes"],
    ["POST", "/v2/sandboxes"],
    ["GET", "/sandboxes/abc"],
  ] as const) {
    const res = await call(method, url, method === "POST" ? { body: {} } : {});
    assert.equal(res.statusCode, 503, `${method} ${url}`);
    assert.ok(Number(res.headers["retry-after"]) > 0);
    assert.match(errorOf(res).message, /starting: building base/);
  }
  assert.deepEqual(service.callsOf("create"), []);

  service.serverStatus = { phase: "ready", accelerator: "kvm" };
  assert.equal((await call("GET", "/v2/sandboxes")).statusCode, 200);
  assert.deepEqual((await call("GET", "/health", asAdmin)).json(), {
    status: "ready",
    accelerator: "kvm",
  });
});

test("/health tells strangers the status only: why a start failed, and how, is the admin's", async () => {
  const { call, service } = useApi();
  service.serverStatus = {
    phase: "failed",
    accelerator: "tcg",
    acceleratorReason: "/dev/kvm: permission denied for uid 0 on host build-7",
    message: "cannot open /var/lib/warren/catalog.sqlite: SQLITE_CORRUPT",
    pooledVmms: 2,
  };
  // A team's key is no admin: the node's configuration is not its to read.
  for (const apiKey of [null, "not-a-key", API_KEY]) {
    const res = await call("GET", "/health", { apiKey });
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json(), { status: "failed" }, `key: ${apiKey}`);
  }
  assert.deepEqual((await call("GET", "/health", asAdmin)).json(), {
    status: "failed",
    accelerator: "tcg",
    acceleratorReason: "/dev/kvm: permission denied for uid 0 on host build-7",
    message: "cannot open /var/lib/warren/catalog.sqlite: SQLITE_CORRUPT",
    pooledVmms: 2,
  });
});

test("unknown routes and methods are JSON 404s", async () => {
  const { call } = useApi();
  for (const [method, url] of [
    ["GET", "/nope"],
    ["GET", "/v3/sandboxes"],
    ["PATCH", "/sandboxes/abc"],
    ["GET", "/"],
  ] as const) {
    const res = await call(method, url);
    assert.equal(res.statusCode, 404, `${method} ${url}`);
    assert.match(String(res.headers["content-type"]), /application\/json/);
    assert.match(errorOf(res).message, /not found/);
  }
});

test("a path id that cannot be a sandbox id is a 404 before any body check", async () => {
  const { call, service } = useApi();
  for (const id of ["ABC", "a-b", "a.b", "%F0%9F%98%80", "a%20b"]) {
    const get = await call("GET", `/sandboxes/${id}`);
    assert.equal(get.statusCode, 404, id);
    errorOf(get);
    const timeout = await call("POST", `/sandboxes/${id}/timeout`, { body: { timeout: "x" } });
    assert.equal(timeout.statusCode, 404, id);
  }
  assert.deepEqual(service.calls, []);
});

test("malformed JSON is 400, an over-limit body 413, a non-JSON content type 415", async () => {
  const { call, service } = useApi({ bodyLimitBytes: 1024 });

  const malformed = await call("POST", "/v2/sandboxes", {
    body: '{"templateID": "base",',
    headers: { "content-type": "application/json" },
  });
  assert.equal(malformed.statusCode, 400);
  assert.match(errorOf(malformed).message, /not valid JSON/);

  const huge = await call("POST", "/v2/sandboxes", {
    body: { templateID: "base", metadata: { big: "x".repeat(2048) } },
  });
  assert.equal(huge.statusCode, 413);
  errorOf(huge);

  const text = await call("POST", "/v2/sandboxes", {
    body: "templateID=base",
    headers: { "content-type": "text/plain" },
  });
  assert.equal(text.statusCode, 415);
  assert.match(errorOf(text).message, /text\/plain/);

  const form = await call("POST", "/v2/sandboxes", {
    body: "templateID=base",
    headers: { "content-type": "application/x-www-form-urlencoded" },
  });
  assert.equal(form.statusCode, 415);

  const notObject = await call("POST", "/v2/sandboxes", {
    body: "[1,2]",
    headers: { "content-type": "application/json" },
  });
  assert.equal(notObject.statusCode, 400);
  assert.equal(errorOf(notObject).message, "body must be object");

  assert.deepEqual(service.callsOf("create"), []);
});

test("prototype-poisoning JSON is refused", async () => {
  const { call } = useApi();
  const res = await call("POST", "/v2/sandboxes", {
    body: '{"templateID":"base","__proto__":{"polluted":true}}',
    headers: { "content-type": "application/json" },
  });
  assert.equal(res.statusCode, 400);
  errorOf(res);
  assert.equal(({} as Record<string, unknown>).polluted, undefined);
});

test("WarrenErrors keep their status and message, with kind and reason; 429 says when to retry", async () => {
  const { call, service } = useApi();
  service.seed({ sandboxId: "abc" });
  const cases = [
    [new WarrenError("not_found", "sandbox abc not found"), 404],
    [new WarrenError("conflict", "sandbox abc is pausing"), 409],
    [new WarrenError("invalid_argument", "template nope does not exist"), 400],
    [new WarrenError("resource_exhausted", "no free slot"), 429],
    [new WarrenError("unavailable", "host is draining"), 503],
    [new WarrenError("sandbox_paused", "sandbox abc is paused: resume it first"), 409],
    [new WarrenError("capacity_exhausted", "node at capacity"), 429],
    [new WarrenError("template_name_taken", "a template named 'x' already exists"), 409],
    [new WarrenError("not_ready", "the server is starting up"), 503],
  ] as const;
  for (const [error, status] of cases) {
    service.failures.set("create", error);
    const res = await call("POST", "/v2/sandboxes", { body: {} });
    assert.equal(res.statusCode, status);
    assert.equal(errorOf(res).message, error.message);
    assert.equal(res.json().error_code, error.kind);
    assert.equal(res.json().reason, error.reason);
    if (status === 429) assert.equal(res.headers["retry-after"], "1");
  }
  // A refusal that knows when room is likely (the start queue's estimate) says so.
  service.failures.set(
    "create",
    new WarrenError("start_queue_full", "node busy starting VMs", { retryAfterS: 7 }),
  );
  const busy = await call("POST", "/v2/sandboxes", { body: {} });
  assert.equal(busy.statusCode, 429);
  assert.equal(busy.headers["retry-after"], "7");
  assert.equal(busy.json().reason, "start_queue_full");
});

test("anything else is a plain 500: no message, no stack", async () => {
  const { call, service } = useApi();
  service.failures.set("list", new Error("ENOENT: /var/lib/warren/secret.db"));
  const res = await call("GET", "/v2/sandboxes");
  assert.equal(res.statusCode, 500);
  assert.deepEqual(res.json(), { code: 500, message: "internal error", error_code: "internal" });

  service.failures.set("get", new WarrenError("vmm_failed", "qemu died at /run/x"));
  const internal = await call("GET", "/sandboxes/abc");
  assert.equal(internal.statusCode, 500);
  assert.deepEqual(internal.json(), {
    code: 500,
    message: "internal error",
    error_code: "internal",
    reason: "vmm_failed",
  });
});

test("500s are logged with their cause", async () => {
  const lines: string[] = [];
  const { pino } = await import("pino");
  const logger = pino({ level: "error" }, { write: (line: string) => lines.push(line) });
  const { call, service } = useApi({ logger });
  service.failures.set("list", new Error("disk on fire"));
  assert.equal((await call("GET", "/v2/sandboxes")).statusCode, 500);
  assert.ok(lines.some((l) => l.includes("disk on fire")));
});

test("never crashes on odd input", async () => {
  const { call, service } = useApi();
  service.seed({ sandboxId: "abc" });
  const bodies = [null, 0, "s", [], true, { timeout: null }, { timeout: [] }, { timeout: {} }];
  for (const body of bodies) {
    for (const url of ["/v2/sandboxes", "/sandboxes", "/sandboxes/abc/connect"]) {
      const res = await call("POST", url, {
        body: JSON.stringify(body),
        headers: { "content-type": "application/json" },
      });
      assert.ok(res.statusCode < 500, `${url} ${JSON.stringify(body)} → ${res.statusCode}`);
      if (res.statusCode >= 400) errorOf(res);
    }
  }
  const queries = [
    "limit=1&limit=2",
    "state=x",
    "state=running,",
    "limit=0",
    "limit=101",
    "limit=1.5",
    "metadata=%",
    "metadata=a",
    "metadata=a%3Db%3Dc",
    "nextToken=%00",
    "order=sideways",
    "startedAfter=yesterday",
  ];
  for (const q of queries) {
    const res = await call("GET", `/v2/sandboxes?${q}`);
    assert.equal(res.statusCode, 400, q);
    errorOf(res);
  }
});
