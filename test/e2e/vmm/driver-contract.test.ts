// The VmmDriver contract on QemuDriver with real guests (TCG here): the base image booted
// once in a network slot of the run's, its captures restored into slots of their own. A
// guest's "memory" is a file on its tmpfs, read and written through envd. The fake's run:
// test/unit/contracts/vmm-driver.test.ts.
import assert from "node:assert/strict";
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { after } from "node:test";
import { NetnsSlotPool, type NetworkSlot } from "../../../src/network/index.js";
import type { VmSpec } from "../../../src/vmm/index.js";
import { vmmDriverContract } from "../../contracts/vmm-driver.contract.js";
import {
  envdUrl,
  initEnvd,
  runInGuest,
  slotVmSpec,
  testVmm,
  waitForEnvd,
} from "../../helpers/guest.js";
import { leakCheck, qemuPidsIn, removeLeftovers } from "../../helpers/leak-check.js";
import { runEnv, runPoolOptions } from "../../helpers/run-env.js";

const SHAPE = { vcpus: 1, memoryMiB: 512 };
/** Keys become file names on the guest's tmpfs. */
const memoryFile = (key: string) => `/tmp/contract-${key.replace(/[^a-z0-9-]/gi, "_")}`;

after(async () => {
  assert.deepEqual(await leakCheck(), [], "no namespace, link or rule left behind");
  assert.equal((await qemuPidsIn(runEnv().dataDir)).length, 0, "no QEMU left running");
});

vmmDriverContract("QemuDriver (real guests)", async () => {
  await removeLeftovers();
  const { images, driver, work } = await testVmm("test-vmm-contract");
  const runDir = join(work, "run");
  mkdirSync(runDir);
  const pool = new NetnsSlotPool({ ...runPoolOptions(), size: 0 });
  // Slots are kept to the end: a reused one's address would reach the last guest's
  // connections.
  const slots = new Map<string, NetworkSlot>();
  const urlOf = (id: string) => envdUrl((slots.get(id) as NetworkSlot).hostAddress);
  return {
    driver,
    runDir,
    async spec(id): Promise<VmSpec> {
      const slot = await pool.acquire();
      slots.set(id, slot);
      return slotVmSpec(id, slot, images, work, SHAPE);
    },
    snapshotDir: (name) => join(work, name),
    async ready(spec) {
      const url = urlOf(spec.id);
      await waitForEnvd(url, 180_000);
      await initEnvd(url, { defaultUser: "user" });
    },
    async remember(vm, key, value) {
      await runInGuest(urlOf(vm.id), `printf %s '${value}' > ${memoryFile(key)}`);
    },
    async recall(vm, key) {
      const out = await runInGuest(urlOf(vm.id), `cat ${memoryFile(key)} 2>/dev/null || true`);
      return out === "" ? undefined : out;
    },
    async cleanup() {
      // VMs a failed test left: killed, and gone before their slots are.
      await driver.killOrphans(runDir);
      for (let i = 0; i < 100 && (await qemuPidsIn(runDir)).length > 0; i++)
        await new Promise((resolve) => setTimeout(resolve, 50));
      for (const slot of slots.values()) await pool.release(slot).catch(() => {});
      await pool.close();
      rmSync(work, { recursive: true, force: true });
    },
  };
});
