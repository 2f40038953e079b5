// The VmmDriver contract on FakeVmmDriver, the driver the orchestrator's unit tests run on:
// its guests are records, their "memory" a map the harness reads and writes. QemuDriver's
// run, with real guests: test/e2e/vmm/driver-contract.test.ts.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Vm } from "../../../src/vmm/index.js";
import { vmmDriverContract } from "../../contracts/vmm-driver.contract.js";
import { FakeSlotPool } from "../../fakes/fake-slot-pool.js";
import { type FakeVm, FakeVmmDriver, fakeVmSpec } from "../../fakes/fake-vmm-driver.js";

vmmDriverContract("FakeVmmDriver", async () => {
  const work = await mkdtemp(join(tmpdir(), "warren-fake-vmm-"));
  const driver = new FakeVmmDriver();
  const slots = new FakeSlotPool();
  const runDir = join(work, "run");
  const guest = (vm: Vm) => (vm as FakeVm).guest;
  return {
    driver,
    runDir,
    spec: async (id) => fakeVmSpec(id, await slots.acquire(), runDir),
    snapshotDir: (name) => join(work, "snapshots", name),
    async ready(spec) {
      const deadline = Date.now() + 5_000;
      const netns = spec.network.kind === "tap" ? spec.network.netns : "";
      while (!driver.vmIn(netns)?.running) {
        if (Date.now() > deadline) throw new Error(`guest ${spec.id} never ran`);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    },
    remember: async (vm, key, value) => {
      guest(vm).memory[key] = value;
    },
    recall: async (vm, key) => guest(vm).memory[key],
    async cleanup() {
      for (const vm of [...driver.alive]) await vm.destroy();
      await slots.close();
      await rm(work, { recursive: true, force: true });
    },
  };
});
