import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { Socket } from "node:net";
import { after, before, test } from "node:test";
import {
  DEFAULT_EGRESS_POLICY,
  EgressPolicyError,
  NetnsSlotPool,
  type NetworkSlot,
  runCommand,
} from "../../../src/network/index.js";
import { WarrenError } from "../../../src/shared/index.js";
import { leakCheck, removeLeftovers } from "../../helpers/leak-check.js";
import { CleanupStack } from "../../helpers/network/cleanup-stack.js";
import { FakeGuest, TAP_OWNER } from "../../helpers/network/fake-guest.js";
import { FAKENET, FakeNet } from "../../helpers/network/fake-net.js";
import { runPoolOptions } from "../../helpers/run-env.js";

// Slot pool: reuse, reset on release, limits, cleanup of what an earlier server left.
// Fake guests (stand-ins for QEMU and the VM, see FakeGuest) and a fake internet
// (FakeNet) check behaviour, not just bookkeeping. Timings: bench/slot-pool.ts.

const NET_PORT = 9090;
const GUEST_PORT = 8080;
const cleanup = new CleanupStack();
const options = { ...runPoolOptions(), tapOwner: TAP_OWNER, egressInterface: FAKENET.hostVeth };

before(async () => {
  await removeLeftovers();
  const net = await FakeNet.start(NET_PORT);
  cleanup.defer(() => net.close());
});

after(async () => {
  await cleanup.run();
  assert.deepEqual(await leakCheck(), []);
});

function usePool(extra: ConstructorParameters<typeof NetnsSlotPool>[0] = {}): NetnsSlotPool {
  const pool = new NetnsSlotPool({ ...options, ...extra });
  cleanup.defer(() => pool.close());
  return pool;
}

/** Boots a fake guest on the slot and says whether it reaches the fake internet. */
async function guestReachesInternet(slot: NetworkSlot): Promise<boolean> {
  const guest = await FakeGuest.attach(slot);
  try {
    return (await guest.agent.connect(FAKENET.public1, NET_PORT, 1000)).ok;
  } finally {
    await guest.close();
  }
}

async function until(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

test("a released slot is reset to the default policy and handed out again", async () => {
  // One slot at most: the slot given back is the one handed out next.
  const pool = usePool({ size: 1, maxSlots: 1 });
  const first = await pool.acquire({ allowInternet: false, allowOut: [], denyOut: [] });
  assert.equal(first.policy.allowInternet, false);
  assert.equal(await guestReachesInternet(first), false);
  await pool.release(first);

  const again = await pool.acquire();
  assert.equal(again, first, "the released slot was not reused");
  assert.deepEqual(again.policy, DEFAULT_EGRESS_POLICY);
  assert.equal(await guestReachesInternet(again), true);
  await pool.release(again);
  await pool.close();
  assert.deepEqual(await leakCheck(), [`netns ${FAKENET.netns}`, `link ${FAKENET.hostVeth}`]);
});

test("a reused slot tracks none of its last tenant's connections", async () => {
  const pool = usePool({ size: 1, maxSlots: 1 });
  const slot = await pool.acquire();
  const guest = await FakeGuest.attach(slot);
  assert.ok((await guest.agent.listen(GUEST_PORT, "guest")).ok);
  // Long-lived connections both ways: the guest's to the internet, the host's to the guest.
  const out = await guest.agent.open(FAKENET.public1, NET_PORT);
  assert.ok(out.ok, JSON.stringify(out));
  const toGuest = await openFromHost(slot.hostAddress, GUEST_PORT);
  try {
    const before = await trackedConnections(slot);
    assert.equal(
      before.namespace.filter((c) => / ESTABLISHED /.test(c)).length,
      2,
      before.namespace.join("\n"),
    );
    assert.equal(
      before.host.filter((c) => / ESTABLISHED /.test(c)).length,
      2,
      before.host.join("\n"),
    );
    // The VMM dies: nothing closes those connections on the wire; the host keeps its socket.
    await guest.kill();
    await pool.release(slot);
    const again = await pool.acquire();
    assert.equal(again, slot, "the released slot was not reused");
    assert.deepEqual(await trackedConnections(again), { namespace: [], host: [] });
    await pool.release(again);
  } finally {
    toGuest.resetAndDestroy();
  }
  await pool.close();
});

/** Connects from the host (as the server) and keeps the connection open, idle. */
function openFromHost(host: string, port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = new Socket();
    socket.once("data", () => resolve(socket));
    socket.once("error", reject);
    socket.connect(port, host);
  });
}

/** The connections tracked for a slot: all of its namespace's, the host's from or to it. */
async function trackedConnections(slot: NetworkSlot) {
  const list = async (file: string, args: string[]) =>
    (await runCommand(file, args)).stdout.split("\n").filter(Boolean);
  const [namespace, from, to] = await Promise.all([
    list("nsenter", [`--net=${slot.netnsPath}`, "conntrack", "-L"]),
    list("conntrack", ["-L", "--orig-src", slot.hostAddress]),
    list("conntrack", ["-L", "--orig-dst", slot.hostAddress]),
  ]);
  return { namespace, host: [...from, ...to] };
}

test("the pool keeps `size` slots ready and removes the extra ones it gets back", async () => {
  const pool = usePool({ size: 1, maxSlots: 3 });
  await pool.start();
  await until(() => pool.stats.idle === 1, "the pool to fill");
  const a = await pool.acquire();
  const b = await pool.acquire();
  await until(() => pool.stats.idle === 1, "the pool to refill");
  assert.deepEqual(pool.stats, { idle: 1, inUse: 2, total: 3 });
  const c = await pool.acquire();
  assert.deepEqual(pool.stats, { idle: 0, inUse: 3, total: 3 });
  await assert.rejects(pool.acquire(), (err: unknown) => {
    assert.ok(err instanceof WarrenError && err.kind === "resource_exhausted", String(err));
    return true;
  });
  await pool.release(a); // kept: the pool had no idle slot
  assert.deepEqual(pool.stats, { idle: 1, inUse: 2, total: 3 });
  await pool.release(b); // removed: the pool is full
  assert.deepEqual(pool.stats, { idle: 1, inUse: 1, total: 2 });
  assert.equal(existsSync(b.netnsPath), false, "the extra slot was not removed");
  assert.equal(existsSync(a.netnsPath), true);
  await pool.release(c);
  assert.deepEqual(pool.stats, { idle: 1, inUse: 0, total: 1 });
  await assert.rejects(pool.release(b), /not in use/);
  await pool.close();
  assert.deepEqual(pool.stats, { idle: 0, inUse: 0, total: 0 });
  await assert.rejects(pool.acquire(), /closed/);
});

test("a bad policy is refused before a slot is taken", async () => {
  const pool = usePool({ size: 0 });
  await assert.rejects(
    pool.acquire({ allowInternet: true, allowOut: ["10.0.0.0/8", "nope"], denyOut: [] }),
    (err: unknown) => err instanceof EgressPolicyError && err.entry === "nope",
  );
  assert.deepEqual(pool.stats, { idle: 0, inUse: 0, total: 0 });
  assert.throws(() => new NetnsSlotPool({ size: -1 }), /size must be an integer/);
  assert.throws(() => new NetnsSlotPool({ baseCidr: "10.201.0.0" }), /baseCidr/);
  assert.throws(() => new NetnsSlotPool({ size: 5, maxSlots: 2 }), /maxSlots/);
});

test("cleanupStale removes what another server left and keeps this pool's slots", async () => {
  // A server that died without cleaning up: its slots are still on the host.
  const crashed = new NetnsSlotPool({ ...options, size: 0 });
  const stale = [await crashed.acquire(), await crashed.acquire()];
  // A server of other names, alive: cleanupStale must leave its slot alone.
  const { netnsPrefix, hostVethPrefix, ruleTag } = runPoolOptions();
  const neighbour = usePool({
    size: 0,
    netnsPrefix: `${netnsPrefix}nb-`,
    hostVethPrefix: `${hostVethPrefix}nb`,
    ruleTag: `${ruleTag}-nb`,
  });
  const theirs = await neighbour.acquire();

  const pool = usePool({ size: 0 });
  const own = await pool.acquire();
  assert.ok(!stale.some((s) => s.index === own.index), "a stale slot's index was reused");

  const report = await pool.cleanupStale();
  assert.deepEqual([...report.netns].sort(), stale.map((s) => s.netns).sort());
  assert.deepEqual([...report.links].sort(), stale.map((s) => s.hostVeth).sort());
  assert.ok(report.hostRules >= 2 * 9, `only ${report.hostRules} host rules removed`);
  for (const s of stale) assert.equal(existsSync(s.netnsPath), false);
  assert.equal(existsSync(own.netnsPath), true);
  assert.equal(await guestReachesInternet(own), true);
  assert.ok(existsSync(theirs.netnsPath) && existsSync(`/sys/class/net/${theirs.hostVeth}`));
  assert.equal(await guestReachesInternet(theirs), true, "the neighbour's host rules are gone");

  // The freed indexes are usable again.
  const next = await pool.acquire();
  assert.ok(stale.some((s) => s.index === next.index));
  await pool.close();
  // Its slots share this run's block: gone before the next test routes to those addresses.
  await neighbour.close();
});

test("adopt takes back a slot a server left in use: its guest's connections kept, its rules once, the rest cleaned", async () => {
  // A server that died with a guest running in slot `kept` (its VMM lived on in the keeper)
  // and a slot `stale` nothing uses any more; the next server takes `kept` back with its
  // sandbox's policy (no internet).
  const crashed = new NetnsSlotPool({ ...options, size: 0 });
  cleanup.defer(() => crashed.close()); // what the test leaves, should it fail half-way
  const closed = { allowInternet: false, allowOut: [], denyOut: [] };
  const kept = await crashed.acquire();
  const stale = await crashed.acquire();
  const guest = await FakeGuest.attach(kept);
  cleanup.defer(() => guest.close());
  assert.ok((await guest.agent.listen(GUEST_PORT, "guest")).ok);
  const toGuest = await openFromHost(kept.hostAddress, GUEST_PORT);
  cleanup.defer(async () => toGuest.destroy());

  const rules = await rulesOf(kept.index);
  assert.ok(rules > 0);

  const pool = usePool({ size: 0 });
  const adopted = await pool.adopt(kept.netns, closed);
  assert.equal(adopted.index, kept.index);
  assert.equal(adopted.hostAddress, kept.hostAddress);
  await assert.rejects(pool.adopt(kept.netns, closed), /taken already/);
  await assert.rejects(pool.adopt("elsewhere-3", closed), /no slot of this pool/);
  const report = await pool.cleanupStale();
  assert.deepEqual(report.netns, [stale.netns], "only the unused slot went");
  assert.equal(existsSync(kept.netnsPath), true);
  assert.equal(await rulesOf(kept.index), rules, "its host rules, each once");
  const tracked = await trackedConnections(adopted);
  assert.ok(
    tracked.host.some((c) => / ESTABLISHED /.test(c)),
    `the host's connection to the guest is still tracked: ${tracked.host.join("\n")}`,
  );
  // The policy it was taken back with is in force (the row's: here, no internet).
  assert.equal((await guest.agent.connect(FAKENET.public1, NET_PORT, 1000)).ok, false);
  // Its policy can change as any slot's, and it goes back to the pool as any other.
  await adopted.setPolicy(DEFAULT_EGRESS_POLICY);
  assert.equal((await guest.agent.connect(FAKENET.public1, NET_PORT, 1000)).ok, true);
  await guest.kill();
  await pool.release(adopted);
  assert.deepEqual(pool.stats, { idle: 0, inUse: 0, total: 0 });
  await pool.close();
});

/** Host rules of slot `index` of this run's pool (by their comment). */
async function rulesOf(index: number): Promise<number> {
  const { stdout } = await runCommand("iptables-save", []);
  const comment = new RegExp(`--comment "?${runPoolOptions().ruleTag}:${index}"?(\\s|$)`);
  return stdout.split("\n").filter((l) => l.startsWith("-A ") && comment.test(l)).length;
}
