// Randomness of guests restored from one snapshot, on the VMM driver and envd
// alone: what a clone reads before the orchestrator's /init, and after it.
import assert from "node:assert/strict";
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { GuestArtifacts } from "../../../src/host-setup/index.js";
import { NetnsSlotPool, type NetworkSlot } from "../../../src/network/index.js";
import { initAttempt } from "../../../src/orchestrator/guest/envd-guest-agent.js";
import type { Vm } from "../../../src/vmm/index.js";
import type { QemuDriver } from "../../../src/vmm/qemu/index.js";
import {
  envdUrl,
  initEnvd,
  runInGuest,
  slotVmSpec,
  testVmm,
  waitForEnvd,
} from "../../helpers/guest.js";
import { leakCheck, removeLeftovers } from "../../helpers/leak-check.js";
import { runPoolOptions } from "../../helpers/run-env.js";
import { sharedBlocks, URANDOM_BLOCKS, urandomBlocks } from "../../helpers/urandom.js";

const SHAPE = { vcpus: 1, memoryMiB: 512 };
async function blocks(url: string): Promise<Set<string>> {
  return urandomBlocks(await runInGuest(url, URANDOM_BLOCKS));
}

/**
 * RNDRESEEDCRNG (_IO('R', 0x07)) as root: the CRNG's key is brand new at the capture, so no
 * time-based reseed (the kernel rekeys on use once its key is older than 1-60 s, less early
 * after boot) comes due in the clones before they are read.
 */
const RESEED_NOW =
  "python3 -c 'import fcntl, os; fcntl.ioctl(os.open(\"/dev/urandom\", os.O_RDONLY), 0x5207)'";

describe("guest randomness across restores of one snapshot (real guests)", () => {
  let images: GuestArtifacts;
  let driver: QemuDriver;
  let pool: NetnsSlotPool;
  let work: string;
  const vms: Vm[] = [];
  const slots: NetworkSlot[] = [];

  before(async () => {
    await removeLeftovers();
    const vmm = await testVmm("test-entropy");
    ({ images, driver, work } = vmm);
    mkdirSync(join(work, "run"));
    pool = new NetnsSlotPool({ ...runPoolOptions(), size: 0 });
  });

  after(async () => {
    for (const vm of vms) await vm.destroy().catch(() => {});
    for (const slot of slots) await pool.release(slot).catch(() => {});
    await pool?.close();
    if (work) rmSync(work, { recursive: true, force: true });
    assert.deepEqual(await leakCheck(), [], "no namespace, link or rule left behind");
  });

  const start = async (id: string, snapshot?: string) => {
    const slot = await pool.acquire();
    slots.push(slot);
    const spec = slotVmSpec(id, slot, images, work, SHAPE);
    const vm = await (snapshot ? driver.restore(snapshot, spec) : driver.boot(spec));
    vms.push(vm);
    const url = envdUrl(slot.hostAddress);
    await waitForEnvd(url, 180_000, vm);
    return { vm, url };
  };

  it("clones repeat the kernel's random stream until /init's seed reseeds each", async () => {
    const source = await start("source");
    assert.match(
      await runInGuest(source.url, "cat /sys/class/misc/hw_random/rng_current", "root"),
      /^virtio_rng\.\d+\n$/,
      "the guest's hwrng is the VMM's virtio-rng",
    );
    await runInGuest(source.url, RESEED_NOW, "root");
    const snapshot = join(work, "snapshot");
    await source.vm.snapshot(snapshot, { resume: false });

    const clones = [await start("clone-a", snapshot), await start("clone-b", snapshot)];
    const [a, b] = (await Promise.all(clones.map(({ url }) => blocks(url)))) as [
      Set<string>,
      Set<string>,
    ];
    // The hazard itself, virtio-rng notwithstanding: its thread only mixes into the pool.
    const before = sharedBlocks(a, b);
    console.log(`# blocks shared before /init: ${before} of 512`);
    assert.ok(before > 256, `clones read from one stream before /init (${before} blocks shared)`);

    // What the orchestrator sends after every restore: a fresh seed with each /init.
    for (const { url } of clones) await initEnvd(url, { ...initAttempt({}, true) });
    const [c, d] = (await Promise.all(clones.map(({ url }) => blocks(url)))) as [
      Set<string>,
      Set<string>,
    ];
    assert.equal(sharedBlocks(c, d), 0, "each clone's CRNG was rekeyed from its own seed");
    assert.equal(sharedBlocks(a, c) + sharedBlocks(b, d), 0, "and left its old stream");
  });
});
