// The guest console is a ring buffer in QEMU, drained over QMP (src/vmm/qemu/console.ts).
// A chardev's backend is not part of the migration stream, so captures made while the console
// was QEMU's stdout (before the ring) restore unchanged, with the snapshot format as it was.
import assert from "node:assert/strict";
import { mkdirSync, rmSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { GuestArtifacts } from "../../../src/host-setup/index.js";
import { NetnsSlotPool } from "../../../src/network/index.js";
import type { Vm } from "../../../src/vmm/index.js";
import { QemuDriver, qemuVersion, spawnLocalVmm } from "../../../src/vmm/qemu/index.js";
import { runInGuest, SlotGuests, testVmm } from "../../helpers/guest.js";
import { leakCheck, qemuPidsIn, removeLeftovers } from "../../helpers/leak-check.js";
import { runEnv, runPoolOptions } from "../../helpers/run-env.js";

const SHAPE = { vcpus: 1, memoryMiB: 512 };
const RING = "ringbuf,id=console,size=65536";
/** The console as QEMU's command line had it before the ring buffer. */
const STDIO = "stdio,id=console,signal=off";

describe("guest console (real guests)", () => {
  let images: GuestArtifacts;
  let driver: QemuDriver;
  /** A driver whose QEMUs get the console the old way: captures as an older Warren made them. */
  let older: QemuDriver;
  let pool: NetnsSlotPool;
  let work: string;
  const guests = new SlotGuests(() => ({ pool, images, work }), SHAPE);
  const { vms } = guests;
  const spec = (id: string) => guests.spec(id);
  const url = (vm: Vm) => guests.url(vm);
  const ready = <T extends Vm>(vm: T) => guests.ready(vm);

  before(async () => {
    await removeLeftovers();
    const vmm = await testVmm("test-console");
    ({ images, work, driver } = vmm);
    older = new QemuDriver({
      accel: driver.accel,
      qemuVersion: await qemuVersion(),
      disks: vmm.disks,
      identities: vmm.identities,
      cgroups: vmm.cgroups,
      spawn: (request) =>
        spawnLocalVmm({ ...request, args: request.args.map((a) => (a === RING ? STDIO : a)) }),
    });
    mkdirSync(join(work, "run"));
    pool = new NetnsSlotPool({ ...runPoolOptions(), size: 0 });
  });

  after(async () => {
    await guests.close();
    await pool?.close();
    if (work) rmSync(work, { recursive: true, force: true });
    assert.deepEqual(await leakCheck(), [], "no namespace, link, rule or cgroup left behind");
    assert.deepEqual(await qemuPidsIn(runEnv().dataDir), [], "no QEMU left running");
  });

  it("restores a capture made while the console was QEMU's stdout, and its console works", async () => {
    const old = await ready(await older.boot(await spec("old")));
    const argv = (await readFile(`/proc/${old.pid}/cmdline`, "utf8")).split("\0");
    assert.ok(argv.includes(STDIO) && !argv.includes(RING), "booted with the old console");
    await runInGuest(url(old), "printf kept > /tmp/memory");
    const paused = join(work, "paused");
    await old.snapshot(paused, { resume: false });
    await old.destroy();
    vms.delete(old);

    const vm = await ready(await driver.restore(paused, await spec("new")));
    const restored = (await readFile(`/proc/${vm.pid}/cmdline`, "utf8")).split("\0");
    assert.ok(restored.includes(RING), "restored with the ring buffer");
    assert.equal(await runInGuest(url(vm), "cat /tmp/memory"), "kept");
    await runInGuest(url(vm), "echo after-restore | sudo tee /dev/ttyS0 >/dev/null");
    assert.match(await vm.consoleTail(), /after-restore/);
  });
});
