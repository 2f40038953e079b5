// Free-disk admission of creates, on a node of fakes over a real data dir: with a reserve
// above what its filesystem has free (a real statfs), a create is refused with 507
// disk_pressure and leaves nothing behind; below it, creates go on.
import assert from "node:assert/strict";
import { statfsSync } from "node:fs";
import { tmpdir } from "node:os";
import { it, type TestContext } from "node:test";
import { WarrenError } from "../../../src/shared/index.js";
import { createInput } from "../../contracts/sandbox-service.contract.js";
import { FakeNode } from "../../fakes/fake-node.js";

function freeMiB(): number {
  const fs = statfsSync(tmpdir());
  return Math.floor((fs.bavail * fs.bsize) / 1024 / 1024);
}

async function startNode(t: TestContext, diskReserveMiB: number): Promise<FakeNode> {
  const node = await FakeNode.start({ diskReserveMiB });
  t.after(() => node.close());
  return node;
}

it("a create is refused (507 disk_pressure) when the disk is below its reserve", async (t) => {
  const node = await startNode(t, freeMiB() + 1024);
  const err = await node.orchestrator.create(createInput("base")).then(
    () => assert.fail("the create was admitted"),
    (e: unknown) => e,
  );
  assert.ok(err instanceof WarrenError, String(err));
  assert.equal(err.reason, "disk_pressure");
  assert.equal(err.status, 507);
  assert.match(err.message, /MiB free.*reserve/);
  assert.deepEqual(node.orchestrator.list({}), []);
  assert.deepEqual(await node.leaks(), []);
});

it("a create is admitted while the disk stays above its reserve", async (t) => {
  const node = await startNode(t, 1);
  const info = await node.orchestrator.create(createInput("base"));
  assert.ok(info.sandboxId);
});
