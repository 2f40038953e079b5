// What every DiskChains must do: flatten a snapshot's disk onto an ancestor's only when the
// plan is committed, keep what the guest reads, refuse what is not below, and after a crash
// between plan and commit finish or drop the flatten by the checksum the catalog recorded
// (the protocol Snapshots follows). Runs on FakeDiskChains in the unit tier
// (test/unit/contracts/) and on Qcow2DiskChains with real qcow2 chains in the e2e tier
// (test/e2e/vmm/disk-chains-contract.test.ts).
import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import { type DiskChains, type FlattenPlan, VmmError } from "../../src/vmm/index.js";

/** Three snapshots, each disk standing on the one before: anchor <- parent <- top. */
export interface Chain {
  readonly anchor: string;
  readonly parent: string;
  readonly top: string;
}

/** What an implementation's test file hands the suite: fresh chains for one test. */
export interface DiskChainsHarness {
  readonly disks: DiskChains;
  chain(): Promise<Chain>;
  /** The snapshot directory `dir`'s disk stands on now. */
  standsOn(dir: string): Promise<string | undefined>;
  /** Whether everything each layer wrote still reads the same through `dir`'s disk. */
  intact(dir: string): Promise<boolean>;
  cleanup(): Promise<void>;
}

/** The meta.json checksum a plan's files carry: what the catalog records before commit(). */
function recordedMeta(plan: FlattenPlan): string {
  const meta = plan.files.find((file) => file.name === "meta.json");
  assert.ok(meta, `meta.json among ${plan.files.map((f) => f.name).join(", ")}`);
  assert.match(meta.sha256, /^[0-9a-f]{64}$/);
  return meta.sha256;
}

/** Registers the suite; `open` is called once per test. */
export function diskChainsContract(name: string, open: () => Promise<DiskChainsHarness>): void {
  async function use(t: TestContext): Promise<DiskChainsHarness & Chain> {
    const harness = await open();
    t.after(() => harness.cleanup());
    return { ...harness, ...(await harness.chain()) };
  }

  describe(`DiskChains contract: ${name}`, () => {
    it("restacks a disk onto an ancestor's when the plan is committed, reading the same", async (t) => {
      const { disks, standsOn, intact, anchor, parent, top } = await use(t);
      const plan = await disks.flatten(top, anchor);
      recordedMeta(plan);
      assert.equal(await standsOn(top), parent, "nothing replaced before commit()");
      await plan.commit();
      assert.equal(await standsOn(top), anchor);
      assert.ok(await intact(top));
      assert.equal(await disks.finishFlatten(top, undefined), false, "nothing left pending");
    });

    it("leaves the snapshot as it was when the plan is discarded", async (t) => {
      const { disks, standsOn, intact, anchor, parent, top } = await use(t);
      const plan = await disks.flatten(top, anchor);
      const meta = recordedMeta(plan);
      await plan.discard();
      assert.equal(await standsOn(top), parent);
      assert.ok(await intact(top));
      assert.equal(await disks.finishFlatten(top, meta), false);
    });

    it("finishes a flatten a crash cut short when the catalog recorded its result", async (t) => {
      const { disks, standsOn, intact, anchor, top } = await use(t);
      const meta = recordedMeta(await disks.flatten(top, anchor));
      // The server died here: the record was written, commit() never ran.
      assert.equal(await disks.finishFlatten(top, meta), true);
      assert.equal(await standsOn(top), anchor);
      assert.ok(await intact(top));
      assert.equal(await disks.finishFlatten(top, meta), false, "finished once");
    });

    it("drops a flatten a crash cut short when the catalog did not record it", async (t) => {
      const { disks, standsOn, intact, anchor, parent, top } = await use(t);
      const meta = recordedMeta(await disks.flatten(top, anchor));
      assert.equal(await disks.finishFlatten(top, undefined), false);
      assert.equal(await standsOn(top), parent);
      assert.ok(await intact(top));
      assert.equal(await disks.finishFlatten(top, meta), false, "dropped, not kept");
    });

    it("refuses to flatten onto a snapshot that is not below, changing nothing", async (t) => {
      const { disks, standsOn, anchor, parent, top } = await use(t);
      await assert.rejects(disks.flatten(parent, top), VmmError);
      await assert.rejects(disks.flatten(anchor, parent), VmmError);
      assert.equal(await standsOn(parent), anchor);
      assert.equal(await standsOn(top), parent);
      assert.equal(await disks.finishFlatten(parent, undefined), false);
    });
  });
}
