// Paused sandboxes' VMMs kept stopped for a quick resume (KeptVmms), on fakes: what a resume
// reuses, and that everything a kept VMM holds is given back when it goes, whyever it goes.
import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import { createInput } from "../../contracts/sandbox-service.contract.js";
import { FakeNode, type FakeNodeSettings } from "../../fakes/fake-node.js";
import type { FakeVm } from "../../fakes/fake-vmm-driver.js";

async function startNode(t: TestContext, settings: FakeNodeSettings = {}): Promise<FakeNode> {
  const node = await FakeNode.start({ keptVmms: { keepMs: 60_000, maxKept: 4 }, ...settings });
  t.after(() => node.close());
  return node;
}

function vmOf(node: FakeNode, sandboxId: string): FakeVm | undefined {
  return [...node.driver.alive].find((v) => v.id === sandboxId);
}

async function eventually(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!check()) {
    if (Date.now() > deadline) assert.fail(`not within 5 s: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe("kept VMMs (on fakes)", () => {
  it("a resume continues the VMM its pause kept: no restore, /init again, same memory", async (t) => {
    const node = await startNode(t);
    const { sandboxId } = await node.orchestrator.create(createInput("base", { secure: true }));
    const vm = vmOf(node, sandboxId) as FakeVm;
    vm.guest.memory.file = "written before the pause";
    await node.orchestrator.pause(sandboxId);
    assert.equal(node.driver.captures.at(-1)?.keptStopped, true);
    assert.equal(vmOf(node, sandboxId), vm, "the VMM stays");
    assert.equal(vm.running, false, "stopped");
    const restores = node.driver.restores;
    const inits = node.agent.inits.length;
    await node.orchestrator.connect(sandboxId, undefined);
    assert.equal(node.driver.restores, restores, "no restore");
    assert.equal(vmOf(node, sandboxId), vm);
    assert.equal(vm.running, true);
    assert.equal(vm.guest.memory.file, "written before the pause");
    assert.equal(node.agent.inits.length, inits + 1, "/init sets the clock again");
    assert.equal(node.logger.events("sandbox.resumed").at(-1)?.fields.kept, true);
    // Paused and resumed again from the continued VMM: still one VMM, still its state.
    await node.orchestrator.pause(sandboxId);
    await node.orchestrator.connect(sandboxId, undefined);
    assert.equal(vmOf(node, sandboxId), vm);
    await node.orchestrator.kill(sandboxId);
    assert.deepEqual(await node.leaks(), []);
  });

  it("a kept VMM goes when its time is up: VMM, slot and runtime dir; the next resume restores", async (t) => {
    const node = await startNode(t, { keptVmms: { keepMs: 50, maxKept: 4 } });
    const { sandboxId } = await node.orchestrator.create(createInput("base"));
    (vmOf(node, sandboxId) as FakeVm).guest.memory.file = "kept in the snapshot";
    await node.orchestrator.pause(sandboxId);
    await eventually(() => vmOf(node, sandboxId) === undefined, "the kept VMM is given up");
    assert.deepEqual(await node.leaks(), [], "a paused sandbox holds nothing");
    const restores = node.driver.restores;
    await node.orchestrator.connect(sandboxId, undefined);
    assert.equal(node.driver.restores, restores + 1);
    assert.equal(vmOf(node, sandboxId)?.guest.memory.file, "kept in the snapshot");
  });

  it("a kill of a paused sandbox takes its kept VMM with it", async (t) => {
    const node = await startNode(t);
    const { sandboxId } = await node.orchestrator.create(createInput("base"));
    await node.orchestrator.pause(sandboxId);
    assert.ok(vmOf(node, sandboxId));
    await node.orchestrator.kill(sandboxId);
    assert.equal(vmOf(node, sandboxId), undefined);
    assert.deepEqual(await node.leaks(), []);
  });

  it("a create that needs the room takes a kept VMM's; the paused sandbox still resumes", async (t) => {
    const node = await startNode(t, { maxSandboxes: 1 });
    const first = await node.orchestrator.create(createInput("base"));
    await node.orchestrator.pause(first.sandboxId);
    assert.ok(vmOf(node, first.sandboxId), "kept while the node has room");
    const second = await node.orchestrator.create(createInput("base"));
    await eventually(() => vmOf(node, first.sandboxId) === undefined, "the kept VMM gave way");
    await assert.rejects(node.orchestrator.connect(first.sandboxId, undefined), /capacity/);
    await node.orchestrator.kill(second.sandboxId);
    await node.orchestrator.connect(first.sandboxId, undefined);
    assert.ok(vmOf(node, first.sandboxId)?.running);
  });

  it("keeps at most maxKept: the longest kept goes first", async (t) => {
    const node = await startNode(t, { keptVmms: { keepMs: 60_000, maxKept: 1 } });
    const a = await node.orchestrator.create(createInput("base"));
    const b = await node.orchestrator.create(createInput("base"));
    await node.orchestrator.pause(a.sandboxId);
    await node.orchestrator.pause(b.sandboxId);
    await eventually(() => vmOf(node, a.sandboxId) === undefined, "a's VMM went");
    assert.ok(vmOf(node, b.sandboxId), "b's stays");
  });

  it("a kept VMM that died meanwhile: the resume restores the snapshot instead", async (t) => {
    const node = await startNode(t);
    const { sandboxId } = await node.orchestrator.create(createInput("base"));
    (vmOf(node, sandboxId) as FakeVm).guest.memory.file = "in the snapshot";
    await node.orchestrator.pause(sandboxId);
    (vmOf(node, sandboxId) as FakeVm).crash();
    const restores = node.driver.restores;
    await node.orchestrator.connect(sandboxId, undefined);
    assert.equal(node.driver.restores, restores + 1);
    assert.equal(vmOf(node, sandboxId)?.guest.memory.file, "in the snapshot");
    await node.orchestrator.kill(sandboxId);
    assert.deepEqual(await node.leaks(), []);
  });

  it("a pause without memory keeps nothing; a reboot resume gives a kept VMM up", async (t) => {
    const node = await startNode(t);
    const a = await node.orchestrator.create(createInput("base"));
    await node.orchestrator.pause(a.sandboxId, { keepMemory: false });
    assert.equal(vmOf(node, a.sandboxId), undefined);
    const b = await node.orchestrator.create(createInput("base"));
    await node.orchestrator.pause(b.sandboxId);
    const kept = vmOf(node, b.sandboxId);
    await node.orchestrator.connect(b.sandboxId, undefined, { reboot: true });
    assert.notEqual(vmOf(node, b.sandboxId), kept, "a fresh VMM booted");
    assert.equal(kept?.gone, true);
  });

  it("a server that stops gives every kept VMM up", async (t) => {
    const node = await startNode(t);
    const { sandboxId } = await node.orchestrator.create(createInput("base"));
    await node.orchestrator.pause(sandboxId);
    await node.restart("graceful");
    assert.equal(vmOf(node, sandboxId), undefined);
    await node.orchestrator.connect(sandboxId, undefined);
    assert.ok(vmOf(node, sandboxId)?.running);
  });
});
