import assert from "node:assert/strict";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import {
  AuthenticationError,
  RateLimitError,
  Sandbox,
  SandboxNotFoundError,
  ServiceBusyError,
} from "e2b";
import type { CreateSandboxInput } from "../../../src/orchestrator/index.js";
import { WarrenError } from "../../../src/shared/errors.js";
import { API_KEY, useApi } from "./api-harness.js";

// The real e2b SDK (2.51) against the API on a loopback port, with the in-memory stand-in
// service behind it: what the SDK sends is parsed right, and what it reads is there.
// Only control-plane calls are made (no envd, no VMs).

const harness = useApi({ domain: "sandboxes.test" });
const { service } = harness;
let opts: { apiKey: string; apiUrl: string; retries: number; requestTimeoutMs: number };

before(async () => {
  await harness.app.listen({ host: "127.0.0.1", port: 0 });
  const { port } = harness.app.server.address() as AddressInfo;
  opts = {
    apiKey: API_KEY,
    apiUrl: `http://127.0.0.1:${port}`,
    retries: 0,
    requestTimeoutMs: 10_000,
  };
});

after(() => harness.app.close());

test("create → getInfo → pause → connect (resume) → setTimeout → kill", async () => {
  harness.service.templates.add("python");
  const sandbox = await Sandbox.create("python", {
    ...opts,
    timeoutMs: 90_500,
    metadata: { owner: "ann", "with space": "a&b=c" },
    envs: { FOO: "bar" },
    lifecycle: { onTimeout: "pause", autoResume: true },
    network: { allowOut: ["1.1.1.1"], denyOut: ["0.0.0.0/0"], allowPublicTraffic: false },
  });
  const input = service.callsOf("create").at(-1)?.[0] as CreateSandboxInput;
  assert.deepEqual(input, {
    teamId: "default",
    templateId: "python",
    timeoutMs: 91_000, // the SDK rounds up to whole seconds
    metadata: { owner: "ann", "with space": "a&b=c" },
    envVars: { FOO: "bar" },
    lifecycle: { onTimeout: "pause", autoResume: true },
    network: { allowOut: ["1.1.1.1"], denyOut: ["0.0.0.0/0"], allowPublicTraffic: false },
    allowInternetAccess: true,
    secure: true,
  });
  assert.equal(sandbox.trafficAccessToken, "traffic-token");
  assert.equal(sandbox.sandboxDomain, "sandboxes.test");

  const info = await Sandbox.getInfo(sandbox.sandboxId, opts);
  assert.equal(info.sandboxId, sandbox.sandboxId);
  assert.equal(info.templateId, "python");
  assert.equal(info.state, "running");
  assert.deepEqual(info.metadata, { owner: "ann", "with space": "a&b=c" });
  assert.ok(info.startedAt instanceof Date && !Number.isNaN(info.startedAt.getTime()));
  assert.ok(info.endAt > info.startedAt);
  assert.deepEqual(info.lifecycle, { onTimeout: "pause", autoResume: true });
  assert.equal(info.network?.allowPublicTraffic, false);
  assert.equal(info.cpuCount, 2);
  assert.equal(info.memoryMB, 512);

  assert.equal(await Sandbox.pause(sandbox.sandboxId, opts), true);
  assert.equal(await Sandbox.pause(sandbox.sandboxId, opts), false); // 409 → false

  const connected = await Sandbox.connect(sandbox.sandboxId, { ...opts, timeoutMs: 60_000 });
  assert.equal(connected.sandboxId, sandbox.sandboxId);
  assert.deepEqual(service.callsOf("connect").at(-1), [sandbox.sandboxId, 60_000]);

  await Sandbox.setTimeout(sandbox.sandboxId, 5000, opts);
  assert.deepEqual(service.callsOf("setTimeout").at(-1), [sandbox.sandboxId, 5000]);

  await Sandbox.updateNetwork(sandbox.sandboxId, { denyOut: ["10.0.0.0/8"] }, opts);
  assert.deepEqual(service.callsOf("updateNetwork").at(-1), [
    sandbox.sandboxId,
    { allowOut: [], denyOut: ["10.0.0.0/8"] },
  ]);

  assert.deepEqual(await Sandbox.getMetrics(sandbox.sandboxId, opts), []);

  assert.equal(await Sandbox.kill(sandbox.sandboxId, opts), true);
  assert.equal(await Sandbox.kill(sandbox.sandboxId, opts), false); // 404 → false
  await assert.rejects(Sandbox.getInfo(sandbox.sandboxId, opts), SandboxNotFoundError);
  await assert.rejects(Sandbox.connect(sandbox.sandboxId, opts), SandboxNotFoundError);
});

test("list: the SDK's paginator with limit 1 and a metadata query", async () => {
  service.sandboxes.clear();
  const tag = { suite: "sdk list", "odd key%": "v&=1" };
  const ids: string[] = [];
  for (let i = 0; i < 4; i++)
    ids.push((await Sandbox.create({ ...opts, metadata: tag })).sandboxId);
  await Sandbox.create({ ...opts, metadata: { suite: "other" } });
  await Sandbox.pause(ids[1] ?? "", opts);

  const paginator = Sandbox.list({ ...opts, limit: 1, query: { metadata: tag } });
  const seen: string[] = [];
  while (paginator.hasNext) {
    const items = await paginator.nextItems();
    assert.ok(items.length <= 1);
    seen.push(...items.map((s) => s.sandboxId));
    assert.ok(seen.length < 50, "pagination does not end");
  }
  assert.deepEqual(seen, [...ids].reverse()); // newest first

  const paused = await Sandbox.list({ ...opts, query: { state: ["paused"] } }).nextItems();
  assert.deepEqual(
    paused.map((s) => s.sandboxId),
    [ids[1]],
  );
  const both = await Sandbox.list({
    ...opts,
    query: { state: ["running", "paused"], metadata: tag },
  }).nextItems();
  assert.equal(both.length, 4);
});

test("errors the SDK maps: 401, 429 (retried after Retry-After), 503", async () => {
  await assert.rejects(
    Sandbox.getInfo("abc", { ...opts, apiKey: "e2b_wrong" }),
    AuthenticationError,
  );

  service.failures.set("create", new WarrenError("resource_exhausted", "no free slot"));
  await assert.rejects(Sandbox.create(opts), RateLimitError);

  // With retries on, the SDK waits Retry-After (1 s) and the second attempt succeeds.
  service.failures.set("create", new WarrenError("resource_exhausted", "no free slot"));
  const before = service.callsOf("create").length;
  const sandbox = await Sandbox.create({ ...opts, retries: 1 });
  assert.ok(sandbox.sandboxId);
  assert.equal(service.callsOf("create").length, before + 2);

  service.serverStatus = { phase: "starting" };
  try {
    await assert.rejects(Sandbox.create(opts), ServiceBusyError);
  } finally {
    service.serverStatus = { phase: "ready" };
  }
});
