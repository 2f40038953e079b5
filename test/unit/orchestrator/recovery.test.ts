// What a start makes of the states a crash leaves (test/e2e/crash-points.test.ts finds them
// with real crashes; here each is set up by hand on fakes, then the node restarts as after a
// kill -9).
import assert from "node:assert/strict";
import { mkdir, readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, it, type TestContext } from "node:test";
import { createInput } from "../../contracts/sandbox-service.contract.js";
import { FakeNode } from "../../fakes/fake-node.js";

async function startNode(t: TestContext): Promise<FakeNode> {
  const node = await FakeNode.start();
  t.after(() => node.close());
  return node;
}

describe("restart recovery (on fakes)", () => {
  it("removes a snapshot directory without a row: a capture the server died in", async (t) => {
    const node = await startNode(t);
    const cut = join(node.layout.snapshotsDir, "cutshort");
    await mkdir(cut);
    await writeFile(join(cut, "meta.json"), "{}");
    const before = await readdir(node.layout.snapshotsDir);
    await node.restart("crash");
    const after = await readdir(node.layout.snapshotsDir);
    assert.deepEqual(after.sort(), before.filter((d) => d !== "cutshort").sort());
    assert.equal(node.logger.events("recovery.snapshot_dirs_removed")[0]?.fields.count, 1);
    assert.deepEqual(await node.leaks(), []);
  });

  it("a pause whose capture is recorded ends paused on it, and resumes where it was", async (t) => {
    const node = await startNode(t);
    const info = await node.orchestrator.create(createInput("base"));
    const vm = [...node.driver.alive].find((v) => v.id === info.sandboxId);
    assert.ok(vm);
    vm.guest.memory.work = "before the pause";
    await node.orchestrator.pause(info.sandboxId);
    // The server died after the capture's row, before the sandbox's: what it would have read.
    const row = await node.catalog.getSandbox(info.sandboxId);
    const capture = await node.catalog.getSnapshot(row?.snapshotId ?? "");
    assert.equal(capture?.kind, "pause");
    await node.catalog.updateSandbox(info.sandboxId, {
      state: "pausing",
      snapshotId: capture?.parentId,
    });
    await node.restart("crash");
    assert.equal(node.orchestrator.get(info.sandboxId).state, "paused");
    assert.equal((await node.catalog.getSandbox(info.sandboxId))?.snapshotId, capture?.id);
    const events = await node.catalog.listEvents(info.sandboxId);
    assert.ok(events.some((e) => e.kind === "sandbox.recovered"));
    assert.deepEqual(await node.leaks(), []);
    await node.orchestrator.connect(info.sandboxId, undefined);
    const resumed = [...node.driver.alive].find((v) => v.id === info.sandboxId);
    assert.equal(resumed?.guest.memory.work, "before the pause");
  });

  it("a pause with no capture recorded is lost", async (t) => {
    const node = await startNode(t);
    const info = await node.orchestrator.create(createInput("base"));
    await node.catalog.updateSandbox(info.sandboxId, { state: "pausing" });
    await node.restart("crash");
    assert.throws(() => node.orchestrator.get(info.sandboxId), { reason: "sandbox_not_found" });
    const row = await node.catalog.getSandbox(info.sandboxId);
    assert.match(row?.endedReason ?? "", /^lost: .* pausing$/);
    assert.deepEqual(await node.leaks(), []);
  });

  it("a resume cut short ends paused on its intact snapshot", async (t) => {
    const node = await startNode(t);
    const info = await node.orchestrator.create(createInput("base"));
    await node.orchestrator.pause(info.sandboxId);
    const paused = await node.catalog.getSandbox(info.sandboxId);
    // The resume got as far as its VMM: a restored VM the crash leaves.
    await node.orchestrator.connect(info.sandboxId, undefined);
    await node.catalog.updateSandbox(info.sandboxId, { state: "resuming" });
    await node.restart("crash");
    assert.equal(node.orchestrator.get(info.sandboxId).state, "paused");
    assert.equal((await node.catalog.getSandbox(info.sandboxId))?.snapshotId, paused?.snapshotId);
    assert.deepEqual(await node.leaks(), []);
    const { resumed } = await node.orchestrator.connect(info.sandboxId, undefined);
    assert.ok(resumed);
  });

  it("drops a base template a rebuild replaced but had not deleted yet, with its data", async (t) => {
    const node = await startNode(t);
    const info = await node.orchestrator.create(createInput("base"));
    const made = await node.orchestrator.createSnapshot(info.sandboxId, { name: "old" });
    await node.orchestrator.kill(info.sandboxId);
    // What a rebuild leaves when it dies after moving the alias: the old row, kind base.
    const old = await node.catalog.getTemplate(made.templateId);
    assert.ok(old);
    await node.catalog.putTemplate({ ...old, kind: "base", aliases: [] });
    await node.restart("crash");
    const bases = (await node.catalog.listTemplates()).filter((tpl) => tpl.kind === "base");
    assert.deepEqual(
      bases.map((tpl) => tpl.aliases),
      [["base"]],
    );
    assert.equal(await node.catalog.getSnapshot(old.snapshotId), undefined, "its data went too");
    assert.deepEqual(await node.leaks(), []);
  });

  it("keeps every snapshot directory a row names", async (t) => {
    const node = await startNode(t);
    const info = await node.orchestrator.create(createInput("base"));
    await node.orchestrator.pause(info.sandboxId);
    const before = (await readdir(node.layout.snapshotsDir)).sort();
    await node.restart("crash");
    assert.deepEqual((await readdir(node.layout.snapshotsDir)).sort(), before);
    assert.equal(node.logger.events("recovery.snapshot_dirs_removed").length, 0);
  });
});
