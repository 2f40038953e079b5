// The DiskChains contract on Qcow2DiskChains: real qcow2 chains on a raw base image, each
// layer written by ScribeVm (a pattern byte per generation, sealed as a capture is), read
// back with qemu-io; flattening runs QEMU's block-stream under a VMM uid. No VM. The fake's run:
// test/unit/contracts/disk-chains.test.ts.
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Qcow2DiskChains, VmmIdentities } from "../../../src/vmm/qemu/index.js";
import { diskChainsContract } from "../../contracts/disk-chains.contract.js";
import { RUN_VMM_UID_COUNT, runVmmUidBase } from "../../helpers/run-env.js";
import { MiB, qemuIo, ScribeVm } from "../../helpers/scribe-vm.js";

const run = promisify(execFile);
const GENERATIONS = 3;
const identities = new VmmIdentities(runVmmUidBase(), RUN_VMM_UID_COUNT);

diskChainsContract("Qcow2DiskChains (qcow2 files, QEMU's block-stream)", async () => {
  const root = await mkdtemp(join(tmpdir(), "warren-disk-chains-"));
  // The base image lies in `root`, outside the snapshots' directory: `root` is its images dir.
  const disks = new Qcow2DiskChains({ imagesDir: root, identities });
  return {
    disks,
    async chain() {
      const base = join(root, "base.raw");
      await writeFile(base, Buffer.alloc(0));
      await run("truncate", ["-s", "64M", base]);
      const vm = new ScribeVm({ path: base, record: { image: base, format: "raw" } });
      // Snapshots lie side by side, the base image outside their directory (as on a node).
      const anchor = join(root, "snapshots", "anchor");
      const parent = join(root, "snapshots", "parent");
      const top = join(root, "snapshots", "top");
      for (const dir of [anchor, parent, top]) await vm.snapshot(dir);
      return { anchor, parent, top };
    },
    standsOn: async (dir) => (await disks.readChain(dir)).disk[1]?.snapshotDir,
    async intact(dir) {
      for (let generation = 1; generation <= GENERATIONS; generation++) {
        const read = `read -P ${generation} ${generation * MiB} 64k`;
        await qemuIo(join(dir, "disk.qcow2"), read);
      }
      return true;
    },
    cleanup: () => rm(root, { recursive: true, force: true }),
  };
});
