// WarmPool on fakes: pools per template sized from demand, idle pools dropped, the memory
// budget, base's floor, forgetting a deleted template, capacity given back. The clock is the
// test's: "time passes" is a number moved, then `tick()` (the pool's periodic check).
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it, type TestContext } from "node:test";
import type { GuestArtifacts } from "../../../src/host-setup/index.js";
import { Capacity, type CapacityLimits } from "../../../src/orchestrator/capacity.js";
import { LifecycleEvents, stateLayout } from "../../../src/orchestrator/index.js";
import {
  type PoolSettings,
  type PoolTemplate,
  WarmPool,
} from "../../../src/orchestrator/pool/warm-pool.js";
import { FakeGuestAgent } from "../../fakes/fake-guest-agent.js";
import { RecordingLogger } from "../../fakes/fake-node.js";
import { FakeSlotPool } from "../../fakes/fake-slot-pool.js";
import { FakeVmmDriver } from "../../fakes/fake-vmm-driver.js";
import { Gate } from "../../fakes/gate.js";

const IDLE_MS = 60_000;
const SHAPE = { vcpus: 1, memoryMiB: 512 };
const IMAGES: GuestArtifacts = {
  kernel: "/fake/vmlinuz",
  initramfs: "/fake/initramfs",
  agentDrive: "/fake/agent-drive",
  baseRootfs: "/fake/rootfs",
  kernelVersion: "6.1.0-fake",
  kernelArgs: "",
  fingerprint: "fake-images-1",
  manifest: "/fake/manifest.json",
};

interface Rig {
  readonly pool: WarmPool;
  readonly driver: FakeVmmDriver;
  readonly slots: FakeSlotPool;
  readonly capacity: Capacity;
  readonly agent: FakeGuestAgent;
  readonly logger: RecordingLogger;
  /** A template whose snapshot the fake driver can restore. */
  template(name: string): Promise<PoolTemplate>;
  /** Moves the test's clock. */
  advance(ms: number): void;
}

async function rig(
  t: TestContext,
  settings: Partial<PoolSettings> & { guestCaCertificate?: string; busy?: () => boolean } = {},
  limits: Partial<CapacityLimits> = {},
): Promise<Rig> {
  const dataDir = await mkdtemp(join(tmpdir(), "warren-pool-"));
  const layout = stateLayout(dataDir);
  await mkdir(layout.runDir, { recursive: true });
  const driver = new FakeVmmDriver();
  const slots = new FakeSlotPool();
  const capacity = new Capacity({
    maxSandboxes: 100,
    maxVcpus: 100,
    maxMemoryMiB: 100 * 1024,
    ...limits,
  });
  const logger = new RecordingLogger();
  let clock = 1_000_000;
  const agent = new FakeGuestAgent(driver, slots);
  const pool = new WarmPool({
    driver,
    slots,
    agent,
    images: IMAGES,
    layout,
    capacity,
    logger,
    events: new LifecycleEvents({ logger, catalog: { recordEvent: async () => {} } }),
    maxPerTemplate: 16,
    maxMemoryMiB: 64 * 1024,
    idleMs: IDLE_MS,
    minAvailableMiB: 0,
    availableMiB: async () => 1_000_000,
    now: () => clock,
    refillDelayMs: 0,
    ...settings,
  });
  t.after(async () => {
    await pool.close();
    await rm(dataDir, { recursive: true, force: true });
  });
  return {
    pool,
    driver,
    slots,
    capacity,
    agent,
    logger,
    async template(name) {
      // A captured guest, as a template's snapshot holds one.
      const vm = await driver.boot({
        id: `template-${name}`,
        shape: SHAPE,
        images: IMAGES,
        baseDisk: IMAGES.baseRootfs,
        network: { kind: "none" },
        runtimeDir: join(layout.runDir, `template-${name}`),
        guestIp: "",
        guestGateway: "",
      });
      const dir = join(layout.snapshotsDir, name);
      await vm.snapshot(dir, { resume: false });
      await rm(vm.spec.runtimeDir, { recursive: true, force: true });
      return { snapshotId: name, dir, shape: SHAPE };
    },
    advance(ms) {
      clock += ms;
    },
  };
}

/** `count` creates from the template at the current instant; the VMMs handed out. */
function burst(pool: WarmPool, template: PoolTemplate, count: number) {
  return Array.from({ length: count }, () => pool.take(template)).filter((w) => w !== undefined);
}

function ready(pool: WarmPool, template: PoolTemplate): number {
  return pool.readyBySnapshot().get(template.snapshotId) ?? 0;
}

describe("WarmPool (on fakes)", () => {
  it("a burst of creates for a template grows its pool toward the burst size", async (t) => {
    const { pool, template, driver } = await rig(t);
    const tpl = await template("task-1");
    assert.equal(burst(pool, tpl, 16).length, 0, "no pool yet: every create restores");
    await pool.settled();
    assert.equal(ready(pool, tpl), 16, "the pool holds the burst");
    const hits = burst(pool, tpl, 16);
    assert.equal(hits.length, 16, "the same burst again is answered from the pool");
    for (const warm of hits) await pool.discard(warm);
    await pool.settled();
    assert.equal(ready(pool, tpl), 16, "and refills for the next one");
    assert.equal(driver.alive.size, 16);
  });

  it("walks a template's own warm-up on each VMM before it is parked; a failing one gives it up", async (t) => {
    const { pool, template, driver, slots } = await rig(t, { maxPerTemplate: 2 });
    const warmed: string[] = [];
    let failing = false;
    const tpl: PoolTemplate = {
      ...(await template("interpreter")),
      async warmUp(host) {
        if (failing) throw new Error("the kernels did not answer");
        warmed.push(host);
      },
    };
    burst(pool, tpl, 2);
    await pool.settled();
    assert.equal(ready(pool, tpl), 2);
    assert.equal(new Set(warmed).size, 2, "each pooled VMM's guest was walked");
    failing = true;
    for (const warm of burst(pool, tpl, 2)) await pool.discard(warm);
    await pool.settled();
    assert.equal(ready(pool, tpl), 0, "no VMM is parked unwarmed");
    assert.equal(driver.alive.size, 0, "the VMMs of failed warm-ups are gone");
    assert.equal(slots.inUse.size, 0, "and their slots are back");
  });

  it("installs the node's egress CA in each VMM while it warms it (a create's /init then finds it trusted)", async (t) => {
    const ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    const { pool, template, agent } = await rig(t, { maxPerTemplate: 2, guestCaCertificate: ca });
    const tpl = await template("task-ca");
    burst(pool, tpl, 2);
    await pool.settled();
    assert.equal(ready(pool, tpl), 2);
    const warmInits = agent.inits.filter((i) => i.body.caCertificates === ca);
    assert.equal(warmInits.length, 2, "one /init with the CA per pooled VMM");
    for (const init of warmInits) {
      assert.equal(init.body.accessToken, undefined, "no token set while warming");
      assert.equal(init.body.timestamp, undefined, "nor a time: the create's /init is newer");
      assert.equal(init.body.envVars, undefined);
    }
  });

  it("a template's pool is capped by the per-template maximum", async (t) => {
    const { pool, template } = await rig(t, { maxPerTemplate: 4 });
    const tpl = await template("task-1");
    burst(pool, tpl, 16);
    await pool.settled();
    assert.equal(ready(pool, tpl), 4);
  });

  it("creates spread wider than a refill time keep a small pool", async (t) => {
    const { pool, template, advance } = await rig(t);
    const tpl = await template("task-1");
    for (let i = 0; i < 10; i += 1) {
      pool.take(tpl);
      await pool.settled();
      advance(10_000);
    }
    assert.equal(ready(pool, tpl), 1, "one create at a time: one warmed VMM suffices");
  });

  it("an idle template shrinks to zero and gives back its VMMs, slots and capacity", async (t) => {
    const { pool, template, advance, driver, slots, capacity, logger } = await rig(t);
    const tpl = await template("task-1");
    burst(pool, tpl, 3);
    await pool.settled();
    assert.equal(ready(pool, tpl), 3);
    advance(IDLE_MS - 1);
    await pool.tick();
    assert.equal(ready(pool, tpl), 3, "not idle yet");
    advance(2);
    await pool.tick();
    await pool.settled();
    assert.equal(pool.stats.templates, 0, "the idle template's pool is gone");
    assert.equal(driver.alive.size, 0);
    assert.equal(slots.inUse.size, 0);
    assert.deepEqual(capacity.usage, { sandboxes: 0, vcpus: 0, memoryMiB: 0 });
    assert.equal(
      logger.events("pool.vmm_released").filter((l) => l.fields.reason === "idle").length,
      3,
    );
  });

  it("the memory budget caps total pooled VMMs and evicts the least recently used template's", async (t) => {
    const { pool, template, advance, logger } = await rig(t, { maxMemoryMiB: 4 * 512 });
    const a = await template("task-a");
    const b = await template("task-b");
    burst(pool, a, 3);
    await pool.settled();
    assert.equal(ready(pool, a), 3);
    advance(10_000);
    burst(pool, b, 3);
    await pool.settled();
    assert.equal(ready(pool, b), 3, "the most recently demanded template is served first");
    assert.equal(ready(pool, a), 1, "the other keeps what the budget leaves");
    assert.ok(pool.stats.memoryMiB <= 4 * 512);
    const evicted = logger.events("pool.vmm_released");
    assert.ok(evicted.every((l) => l.fields.snapshotId === "task-a"));
    assert.ok(evicted.every((l) => l.fields.reason === "memory_budget"));

    // task-a is demanded again: now task-b is the least recently used.
    advance(10_000);
    assert.ok(pool.take(a), "a hit");
    await pool.settled();
    assert.equal(ready(pool, a), 3);
    assert.equal(ready(pool, b), 1);
    assert.ok(pool.stats.memoryMiB <= 4 * 512);
  });

  it("base keeps its floor, grows with demand and falls back to the floor when idle", async (t) => {
    const { pool, template, advance } = await rig(t);
    const base = await template("base");
    pool.keepWarm(base, 2);
    await pool.settled();
    assert.equal(ready(pool, base), 2);
    burst(pool, base, 5);
    await pool.settled();
    assert.equal(ready(pool, base), 5, "demand beyond the floor grows it");
    advance(IDLE_MS + 1);
    await pool.tick();
    await pool.settled();
    assert.equal(ready(pool, base), 2, "idle: back to the floor, not to zero");
    assert.equal(pool.stats.templates, 1);
  });

  it("warms nothing while creates wait their turn to start (busy), and refills after", async (t) => {
    let busy = true;
    const { pool, template } = await rig(t, { busy: () => busy });
    const base = await template("base");
    pool.keepWarm(base, 2);
    await pool.settled();
    assert.equal(ready(pool, base), 0, "its refills would take the waiting creates' CPU");
    busy = false;
    await pool.tick();
    await pool.settled();
    assert.equal(ready(pool, base), 2);
  });

  it("with no demand-sized pools (max 0) only the floor is kept", async (t) => {
    const { pool, template } = await rig(t, { maxPerTemplate: 0 });
    const base = await template("base");
    const other = await template("task-1");
    pool.keepWarm(base, 1);
    burst(pool, base, 4);
    burst(pool, other, 4);
    await pool.settled();
    assert.equal(ready(pool, base), 1);
    assert.equal(pool.stats.templates, 1, "no pool for the other template");
  });

  it("forgetting a template drops its pool, and creates racing the deletion make no more", async (t) => {
    const { pool, template, driver, capacity } = await rig(t);
    const tpl = await template("task-1");
    burst(pool, tpl, 3);
    await pool.settled();
    await pool.forget(tpl.snapshotId);
    assert.equal(pool.stats.templates, 0);
    assert.equal(driver.alive.size, 0, "its VMMs are gone before its snapshot may be");
    assert.equal(pool.take(tpl), undefined);
    await pool.settled();
    assert.equal(pool.stats.templates, 0, "a late create did not bring it back");
    assert.deepEqual(capacity.usage, { sandboxes: 0, vcpus: 0, memoryMiB: 0 });
  });

  it("a VMM being warmed when its template is forgotten is given up", async (t) => {
    const { pool, template, driver, agent } = await rig(t);
    const tpl = await template("task-1");
    // The pool's VMM is held while its guest is being warmed.
    const gate = new Gate();
    const exercise = agent.exercise.bind(agent);
    agent.exercise = async (host) => {
      await gate.passed(host);
      await exercise(host);
    };
    pool.take(tpl);
    const settling = pool.settled();
    await gate.reached(1);
    await pool.forget(tpl.snapshotId);
    gate.open();
    await settling;
    assert.equal(pool.stats.ready, 0);
    assert.equal(driver.alive.size, 0, "the VMM warmed for it was given up");
  });

  it("pooled VMMs count against capacity, and a full node gives them up to creates", async (t) => {
    const { pool, template, capacity, driver } = await rig(t, {}, { maxSandboxes: 4 });
    const a = await template("task-a");
    burst(pool, a, 8);
    await pool.settled();
    assert.equal(ready(pool, a), 4, "the pool stops at the node's capacity");
    assert.equal(capacity.usage.sandboxes, 4);
    // Four creates of another template: each takes a pooled VMM's room rather than a 429.
    const held = Array.from({ length: 4 }, () => capacity.reserve(SHAPE));
    await pool.settled();
    assert.equal(pool.stats.ready, 0);
    assert.equal(driver.alive.size, 0, "the VMMs given up are gone");
    assert.throws(() => capacity.reserve(SHAPE), { reason: "capacity_exhausted" });
    for (const release of held) release();
    assert.deepEqual(capacity.usage, { sandboxes: 0, vcpus: 0, memoryMiB: 0 });
  });

  it("capacity and slots are exactly what the pool holds after takes, evictions and close", async (t) => {
    const { pool, template, advance, capacity, slots } = await rig(t, { maxMemoryMiB: 3 * 512 });
    const a = await template("task-a");
    const b = await template("task-b");
    burst(pool, a, 3);
    await pool.settled();
    advance(1_000);
    const taken = burst(pool, b, 2);
    await pool.settled();
    assert.equal(pool.stats.ready, 3);
    assert.equal(capacity.usage.sandboxes, 3 + taken.length);
    assert.equal(slots.inUse.size, 3 + taken.length);
    for (const warm of taken) await pool.discard(warm);
    await pool.close();
    assert.deepEqual(capacity.usage, { sandboxes: 0, vcpus: 0, memoryMiB: 0 });
    assert.equal(slots.inUse.size, 0);
  });
});
