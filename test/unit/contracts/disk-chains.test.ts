// The DiskChains contract on FakeDiskChains, the disk chains the orchestrator's unit tests
// run on. Qcow2DiskChains' run, on real qcow2 chains: test/e2e/vmm/disk-chains-contract.test.ts.
import { diskChainsContract } from "../../contracts/disk-chains.contract.js";
import { FakeDiskChains } from "../../fakes/fake-disk-chains.js";

diskChainsContract("FakeDiskChains", async () => {
  const disks = new FakeDiskChains();
  return {
    disks,
    async chain() {
      const anchor = "/fake/snapshots/anchor";
      const parent = "/fake/snapshots/parent";
      const top = "/fake/snapshots/top";
      disks.stack(anchor, "/fake/base");
      disks.stack(parent, anchor);
      disks.stack(top, parent);
      return { anchor, parent, top };
    },
    standsOn: async (dir) => disks.backingOf(dir),
    intact: async () => true,
    cleanup: async () => {},
  };
});
