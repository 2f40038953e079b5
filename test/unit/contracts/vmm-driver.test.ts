// The VmmDriver contract on FakeVmmDriver, the driver the orchestrator's unit tests run on:
// its guests are records, their "memory" a map the harness reads and writes. QemuDriver's
// run, with real guests: test/e2e/vmm/driver-contract.test.ts.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Vm, VmSpec } from "../../../src/vmm/index.js";
import { vmmDriverContract } from "../../contracts/vmm-driver.contract.js";
import { type FakeVm, FakeVmmDriver } from "../../fakes/fake-vmm-driver.js";

vmmDriverContract("FakeVmmDriver", async () => {
  const work = await mkdtemp(join(tmpdir(), "warren-fake-vmm-"));
  const driver = new FakeVmmDriver();
  const runDir = join(work, "run");
  const guest = (vm: Vm) => (vm as FakeVm).guest;
  return {
    driver,
    runDir,
    spec: async (id): Promise<VmSpec> => ({
      id,
      shape: { vcpus: 1, memoryMiB: 512 },
      images: {
        kernel: "/fake/vmlinuz",
        kernelVersion: "6.1.0-fake",
        fingerprint: "fake-images-1",
        initramfs: "/fake/initramfs",
        agentDrive: "/fake/agent-drive",
      },
      baseDisk: join(work, "base.img"),
      network: { kind: "tap", netns: `contract-${id}`, tap: "tap0" },
      runtimeDir: join(runDir, id),
      guestIp: "169.254.0.21/30",
      guestGateway: "169.254.0.22",
    }),
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
      await rm(work, { recursive: true, force: true });
    },
  };
});
