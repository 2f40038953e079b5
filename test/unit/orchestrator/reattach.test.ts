// Re-adoption at start (src/orchestrator/reattach.ts) on fakes: a node whose VMMs live on in
// a keeper (FakeVmmDriver.keeper) restarts as after a kill -9 (or a stop with
// WARREN_ON_STOP=detach), and takes its running sandboxes back — the same VM, slot index,
// volumes and deadline — while every other VMM the keeper held is killed.
// test/e2e/restart.test.ts does it with a real server, keeper and guests.
import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import { createInput } from "../../contracts/sandbox-service.contract.js";
import { FakeNode, type FakeNodeSettings } from "../../fakes/fake-node.js";

async function startNode(t: TestContext, settings: FakeNodeSettings = {}): Promise<FakeNode> {
  const node = await FakeNode.start({ keeper: true, ...settings });
  t.after(() => node.close());
  return node;
}

const vmOf = (node: FakeNode, id: string) => [...node.driver.alive].find((vm) => vm.id === id);

describe("re-adoption after a restart (on fakes)", () => {
  it("takes a running sandbox back: same VM, memory, slot, deadline; it works as before", async (t) => {
    const node = await startNode(t);
    const info = await node.orchestrator.create(createInput("base", { timeoutMs: 600_000 }));
    const vm = vmOf(node, info.sandboxId);
    assert.ok(vm);
    vm.guest.memory.counter = "41";
    const slot = [...node.slots.inUse][0];
    await node.restart("crash");
    assert.equal(vmOf(node, info.sandboxId), vm, "the same VMM");
    assert.deepEqual(node.driver.reattached, [info.sandboxId]);
    assert.deepEqual(node.slots.adopted, [slot?.index], "its slot, by index");
    const after = node.orchestrator.get(info.sandboxId);
    assert.equal(after.state, "running");
    assert.equal(after.endAt.getTime(), info.endAt.getTime(), "its deadline unchanged");
    assert.equal(node.logger.events("sandbox.reattached")[0]?.fields.sandboxId, info.sandboxId);
    const events = await node.catalog.listEvents(info.sandboxId);
    assert.ok(events.some((e) => e.kind === "sandbox.reattached"));
    // It pauses, resumes and forks as any running sandbox.
    await node.orchestrator.pause(info.sandboxId);
    await node.orchestrator.connect(info.sandboxId, undefined);
    assert.equal(vmOf(node, info.sandboxId)?.guest.memory.counter, "41");
    const [child] = await node.orchestrator.fork(info.sandboxId, { count: 1 });
    assert.ok(child && "sandbox" in child);
    await node.orchestrator.kill(child.sandbox.sandboxId);
    await node.orchestrator.kill(info.sandboxId);
    assert.deepEqual(await node.leaks(), []);
  });

  it("its TTL runs from the row's end time: one that passed while away expires at once", async (t) => {
    const node = await startNode(t);
    const info = await node.orchestrator.create(createInput("base", { timeoutMs: 300 }));
    await node.restart("crash");
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.throws(() => node.orchestrator.get(info.sandboxId), { reason: "sandbox_not_found" });
    assert.equal((await node.catalog.getSandbox(info.sandboxId))?.endedReason, "timeout");
    assert.deepEqual(await node.leaks(), []);
  });

  it("serves its volumes again in its slot", async (t) => {
    const node = await startNode(t);
    const mounts = [{ volumeId: "vol-1", name: "data", path: "/mnt/data" }];
    const info = await node.orchestrator.create(createInput("base", { volumeMounts: mounts }));
    await node.restart("crash");
    const network = vmOf(node, info.sandboxId)?.spec.network;
    assert.deepEqual(
      [...node.volumes.open.entries()].map(([slot, ids]) => [slot.netns, ids]),
      [[network?.kind === "tap" ? network.netns : "", ["vol-1"]]],
    );
    await node.orchestrator.kill(info.sandboxId);
    assert.deepEqual(await node.leaks(), []);
  });

  it("kills every VMM the keeper held that no running row takes back; a row without its VMM is lost", async (t) => {
    const node = await startNode(t, { poolSize: 1 });
    const kept = await node.orchestrator.create(createInput("base"));
    const gone = await node.orchestrator.create(createInput("base"));
    const paused = await node.orchestrator.create(createInput("base"));
    await node.orchestrator.pause(paused.sandboxId);
    await node.orchestrator.settled(); // the pool's warm VMM is up
    const before = new Set([...node.driver.alive].map((vm) => vm.id));
    assert.ok(before.size >= 3, "two sandboxes and a warm VMM");
    vmOf(node, gone.sandboxId)?.crash("died while no server ran");
    await node.restart("crash");
    const alive = [...node.driver.alive].map((vm) => vm.id);
    assert.ok(alive.includes(kept.sandboxId));
    for (const id of before)
      if (id !== kept.sandboxId)
        assert.ok(!node.driver.reattached.includes(id), `${id} was not taken back`);
    const lost = await node.catalog.getSandbox(gone.sandboxId);
    assert.equal(lost?.state, "killed");
    assert.match(lost?.endedReason ?? "", /^lost: /);
    assert.equal(node.orchestrator.get(paused.sandboxId).state, "paused");
    await node.orchestrator.kill(kept.sandboxId);
    await node.orchestrator.kill(paused.sandboxId);
    assert.deepEqual(await node.leaks(), []);
  });

  it("a VMM whose disk stands on a capture its row does not name is not taken back: lost", async (t) => {
    const node = await startNode(t);
    const info = await node.orchestrator.create(createInput("base"));
    const vm = vmOf(node, info.sandboxId);
    assert.ok(vm);
    // A capture the server died in before its row: the VM stands on a directory no row names.
    vm.diskSnapshotDir = `${node.layout.snapshotsDir}/cut-short`;
    await node.restart("crash");
    const row = await node.catalog.getSandbox(info.sandboxId);
    assert.equal(row?.state, "killed");
    assert.match(row?.endedReason ?? "", /could not be taken back .*during a capture/);
    assert.equal(vm.gone, true, "its VMM was killed");
    assert.deepEqual(await node.leaks(), []);
  });

  it("a capture recorded before the server died, its row not moved onto it yet, becomes the row's", async (t) => {
    const node = await startNode(t);
    const info = await node.orchestrator.create(createInput("base"));
    const before = (await node.catalog.getSandbox(info.sandboxId))?.snapshotId;
    await node.orchestrator.createSnapshot(info.sandboxId, { name: "mid" });
    const captured = (await node.catalog.getSandbox(info.sandboxId))?.snapshotId;
    assert.notEqual(captured, before);
    // What the catalog held had the server died between the capture's row and the sandbox's.
    await node.catalog.updateSandbox(info.sandboxId, { snapshotId: before });
    await node.restart("crash");
    assert.equal(node.orchestrator.get(info.sandboxId).state, "running");
    assert.equal((await node.catalog.getSandbox(info.sandboxId))?.snapshotId, captured);
    await node.orchestrator.kill(info.sandboxId);
  });

  it("a stop with onStop detach leaves running sandboxes in the keeper for the next server", async (t) => {
    const node = await startNode(t, { onStop: "detach" });
    const info = await node.orchestrator.create(createInput("base"));
    const vm = vmOf(node, info.sandboxId);
    const captures = node.driver.captures.length;
    await node.restart("graceful");
    assert.equal(node.driver.captures.length, captures, "nothing was paused");
    assert.equal(vmOf(node, info.sandboxId), vm);
    assert.equal(node.orchestrator.get(info.sandboxId).state, "running");
    assert.ok(node.logger.events("sandbox.detached").length === 1);
    await node.orchestrator.kill(info.sandboxId);
    assert.deepEqual(await node.leaks(), []);
  });

  it("without a keeper, a crash's running sandboxes are lost as before", async (t) => {
    const node = await startNode(t, { keeper: false });
    const info = await node.orchestrator.create(createInput("base"));
    await node.restart("crash");
    const row = await node.catalog.getSandbox(info.sandboxId);
    assert.match(row?.endedReason ?? "", /^lost: the server stopped while the sandbox was running/);
    assert.deepEqual(await node.leaks(), []);
  });
});
