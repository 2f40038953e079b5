import assert from "node:assert/strict";
import { it } from "node:test";
import { LIFECYCLE_EVENTS, LifecycleEvents, type NodeStats } from "../orchestrator/index.js";
import { silentLogger } from "../shared/index.js";
import { NodeMetrics } from "./prometheus.js";

const NO_HISTORY = { recordEvent: async () => {} };
const TIMING = { pausedMs: 40, deviceStateMs: 1, memoryMs: 20, diskMs: 5, dirtyPages: 100 };

/** `name{labels} value` lines of the text format, by `name{labels}`. */
function parse(text: string): Map<string, number> {
  const samples = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const at = line.lastIndexOf(" ");
    samples.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return samples;
}

const STATS: NodeStats = {
  sandboxesByState: { running: 2, paused: 1 },
  pool: { ready: 3, memoryMiB: 1536, templates: 1 },
  sandboxes: [
    { sandboxId: "abc", templateId: "base", cpuUsedPct: 12.5, memUsedBytes: 64 * 1024 * 1024 },
    { sandboxId: "def", templateId: "base" },
  ],
  starts: { starting: 4, queued: 17, concurrency: 4, maxQueued: 256 },
  capacity: {
    maxSandboxes: 100,
    maxVcpus: 32,
    maxMemoryMiB: 65536,
    sandboxes: 2,
    vcpus: 4,
    memoryMiB: 1024,
  },
};

it("counts the operations the orchestrator and builds emit, and reads gauges at each scrape", async () => {
  let stats: NodeStats | undefined;
  const metrics = new NodeMetrics(() => stats);
  const events = new LifecycleEvents({ logger: silentLogger, catalog: NO_HISTORY });
  metrics.follow(events);
  const created = { sandboxId: "abc", snapshotId: "s1", from: "template" } as const;
  await events.emit("sandbox.created", { ...created, durationMs: 120 });
  await events.emit("sandbox.created", { ...created, durationMs: 80 });
  await events.emit("sandbox.created", {
    ...created,
    sandboxId: "kid",
    from: "fork",
    durationMs: 80,
  });
  events.emit("sandbox.vm_up", { sandboxId: "abc", pooled: true, vmMs: 10, initMs: 20 });
  await events.emit("sandbox.paused", { sandboxId: "abc", keepMemory: true, ...TIMING });
  await events.emit("sandbox.forked", {
    sandboxId: "abc",
    snapshotId: "s2",
    count: 4,
    started: 3,
    spilled: 0,
    durationMs: 900,
  });
  await events.emit("sandbox.killed", {
    sandboxId: "abc",
    reason: "lost: the VMM exited (SIGSEGV)",
  });
  events.emit("build.ready", { buildId: "b", name: "t", durationMs: 42_000 });
  events.emit("build.failed", { buildId: "c", step: undefined, message: "no" });
  const snapshotted = { sandboxId: "abc", template: "t", snapshotId: "s3" } as const;
  await events.emit("sandbox.snapshotted", { ...snapshotted, kind: "snapshot" });
  // A build's layer is no snapshot operation; events whose mapping is NO_METRIC move nothing.
  await events.emit("sandbox.snapshotted", { ...snapshotted, kind: "layer" });
  events.emit("sandbox.creating", { sandboxId: "abc", snapshotId: "s1", pooled: false });
  metrics.apiAnswered(429, "capacity_exhausted");
  metrics.apiAnswered(404, "sandbox_not_found");
  metrics.apiAnswered(200, undefined);

  const empty = parse(await metrics.registry.metrics());
  assert.equal(empty.get('warren_sandboxes{state="running"}'), undefined, "no orchestrator yet");
  stats = STATS;
  const samples = parse(await metrics.registry.metrics());
  const expect = {
    'warren_sandbox_operations_total{op="create"}': 2,
    'warren_sandbox_operations_total{op="pause"}': 1,
    'warren_sandbox_operations_total{op="fork"}': 1,
    'warren_sandbox_operations_total{op="kill"}': 1,
    'warren_sandbox_operations_total{op="snapshot"}': 1,
    'warren_sandbox_operation_duration_seconds_count{op="create"}': 2,
    'warren_sandbox_operation_duration_seconds_sum{op="create"}': 0.2,
    'warren_sandbox_operation_duration_seconds_bucket{le="0.1",op="create"}': 1,
    'warren_vm_starts_total{pooled="true"}': 1,
    'warren_fork_children_total{outcome="started"}': 3,
    'warren_fork_children_total{outcome="failed"}': 1,
    'warren_sandbox_ends_total{reason="lost"}': 1,
    'warren_template_builds_total{status="ready"}': 1,
    'warren_template_builds_total{status="error"}': 1,
    warren_template_build_duration_seconds_count: 1,
    'warren_api_errors_total{status="429",reason="capacity_exhausted"}': 1,
    'warren_api_errors_total{status="404",reason="sandbox_not_found"}': 1,
    'warren_sandboxes{state="running"}': 2,
    'warren_sandboxes{state="paused"}': 1,
    warren_pool_vms_ready: 3,
    'warren_start_queue{kind="queued"}': 17,
    'warren_start_queue{kind="max_queued"}': 256,
    'warren_capacity{resource="vcpus",kind="limit"}': 32,
    'warren_sandbox_cpu_used_percent{sandbox_id="abc",template_id="base"}': 12.5,
    'warren_sandbox_memory_used_bytes{sandbox_id="abc",template_id="base"}': 64 * 1024 * 1024,
  };
  for (const [name, value] of Object.entries(expect)) assert.equal(samples.get(name), value, name);
  assert.equal(samples.get('warren_sandbox_operation_duration_seconds_sum{op="pause"}'), 0.04);
  assert.equal(
    samples.get('warren_sandbox_cpu_used_percent{sandbox_id="def",template_id="base"}'),
    undefined,
    "no sample yet: no series",
  );
  assert.ok(samples.has("warren_process_resident_memory_bytes"), "the server process's own");
});

it("says, for every lifecycle event, which metrics it moves or that it moves none", () => {
  const mapped = new NodeMetrics(() => undefined).eventMetrics;
  for (const name of Object.keys(LIFECYCLE_EVENTS)) {
    assert.ok(Object.hasOwn(mapped, name), `${name} has no metric mapping (NO_METRIC if none)`);
  }
  assert.deepEqual(Object.keys(mapped).sort(), Object.keys(LIFECYCLE_EVENTS).sort());
});
