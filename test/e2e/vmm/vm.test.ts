import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { GuestArtifacts } from "../../../src/host-setup/index.js";
import { NetnsSlotPool, type NetworkSlot } from "../../../src/network/index.js";
import {
  QmpError,
  SnapshotMismatchError,
  type Vm,
  VmmError,
  type VmSpec,
} from "../../../src/vmm/index.js";
import type { QemuDriver } from "../../../src/vmm/qemu/index.js";
import {
  envdUrl,
  initEnvd,
  sandboxAt,
  slotVmSpec,
  testVmm,
  waitForEnvd,
} from "../../helpers/guest.js";
import { leakCheck, qemuPidsIn, removeLeftovers } from "../../helpers/leak-check.js";
import { FAKENET, FakeNet } from "../../helpers/network/fake-net.js";
import { RUN_VMM_UID_COUNT, runEnv, runPoolOptions, runVmmUidBase } from "../../helpers/run-env.js";

const FAKENET_PORT = 47001;
const HOST_PORT = 47002;
const SHAPE = { vcpus: 1, memoryMiB: 512 };

/** QEMUs of this run (a Warren server on the host may run its own). */
async function qemuCount(): Promise<number> {
  return (await qemuPidsIn(runEnv().dataDir)).length;
}

describe("QEMU microVMs: boot, snapshot, restore, pause/resume, fork, egress (real guests)", () => {
  let images: GuestArtifacts;
  let driver: QemuDriver;
  let pool: NetnsSlotPool;
  let fakenet: FakeNet;
  let hostListener: Server;
  let work: string;
  const vms = new Set<Vm>();
  const slots = new Set<NetworkSlot>();

  const spec = (id: string, slot: NetworkSlot): VmSpec => slotVmSpec(id, slot, images, work, SHAPE);
  const acquire = async () => {
    const slot = await pool.acquire();
    slots.add(slot);
    return slot;
  };
  const track = (vm: Vm) => {
    vms.add(vm);
    return vm;
  };
  // The slot is kept (released in `after`): a later VM in a reused slot would have the same
  // envd address, and the SDK's pooled keep-alive connection to the gone guest would fail
  // its first request there.
  const dispose = async (vm: Vm) => {
    await vm.destroy();
    vms.delete(vm);
  };
  const run = async (slot: NetworkSlot, cmd: string) =>
    (await sandboxAt(envdUrl(slot.hostAddress)).commands.run(cmd, { timeoutMs: 60_000 })).stdout;
  const canConnect = async (slot: NetworkSlot, host: string, port: number) => {
    const probe = `python3 -c "import socket; socket.create_connection(('${host}', ${port}), 3); print('connected')" || echo refused`;
    return (await run(slot, probe)).trim() === "connected";
  };

  before(async () => {
    await removeLeftovers();
    const vmm = await testVmm("test-vmm");
    ({ images, driver, work } = vmm);
    mkdirSync(join(work, "run"));
    fakenet = await FakeNet.start(FAKENET_PORT);
    pool = new NetnsSlotPool({
      ...runPoolOptions(),
      size: 0,
      egressInterface: FAKENET.hostVeth,
    });
    hostListener = createServer((socket) => socket.end("host\n")).listen(HOST_PORT, "0.0.0.0");
  });

  after(async () => {
    for (const vm of vms) await vm.destroy().catch(() => {});
    for (const slot of slots) await pool.release(slot).catch(() => {});
    await pool?.close();
    await fakenet?.close();
    hostListener?.close();
    if (work) rmSync(work, { recursive: true, force: true });
    assert.deepEqual(await leakCheck(), [], "no namespace, link or rule left behind");
    assert.equal(await qemuCount(), 0, "no QEMU left running");
  });

  it("cleans up after a VM that fails to start (no QEMU, no runtime files left)", async () => {
    const slot = await acquire();
    const bad = {
      ...spec("broken", slot),
      images: { ...images, kernel: join(work, "no-such-kernel") },
    };
    await assert.rejects(driver.boot(bad), (err: unknown) => {
      assert.ok(err instanceof VmmError);
      assert.match(err.message, /QEMU exited unexpectedly/);
      return true;
    });
    assert.equal(existsSync(bad.runtimeDir), false, "runtime dir removed");
    assert.equal(await qemuCount(), 0);
    await assert.rejects(
      driver.restore(join(work, "no-such-snapshot"), spec("nosnap", slot)),
      VmmError,
    );
    assert.equal(existsSync(join(work, "run", "nosnap")), false);
    await pool.release(slot);
    slots.delete(slot);
  });

  let booted: { vm: Vm; slot: NetworkSlot; sleepPid: string };
  let snapshotA: string;

  it("cold boots the base image and runs commands through envd in the guest", async () => {
    const slot = await acquire();
    const vm = track(
      await driver.boot({ ...spec("boot", slot), shape: { ...SHAPE, diskSizeMiB: 3072 } }),
    );
    const uid = Number(
      execFileSync("ps", ["-o", "uid=", "-p", String(vm.pid)], { encoding: "utf8" }).trim(),
    );
    const base = runVmmUidBase();
    assert.ok(uid >= base && uid < base + RUN_VMM_UID_COUNT, `QEMU dropped root for uid ${uid}`);
    const url = envdUrl(slot.hostAddress);
    const readyMs = await waitForEnvd(url, 180_000, vm);
    await initEnvd(url, { defaultUser: "user", envVars: { STAGE: "boot" } });
    const out = await run(
      slot,
      "whoami; echo $STAGE; python --version; node --version; sudo -n true && echo sudo-ok; stat -f -c %T /tmp",
    );
    assert.match(out, /^user\nboot\nPython 3\.\d+\.\d+\nv\d+\.\d+\.\d+\nsudo-ok\ntmpfs\n$/);
    const rootMiB = Number((await run(slot, "df -m --output=size / | tail -1")).trim());
    assert.ok(rootMiB > 2800, `root filesystem grown to the requested 3 GiB disk (${rootMiB} MiB)`);
    const handle = await sandboxAt(url).commands.run("sleep 3600", {
      background: true,
      timeoutMs: 0,
    });
    await run(slot, "echo on-disk > /home/user/disk.txt; echo in-tmpfs > /tmp/tmpfs.txt");
    booted = { vm, slot, sleepPid: String(handle.pid) };
    console.log(`# cold boot to envd ready: ${Math.round(readyMs)} ms (${driver.accel})`);
  });

  it("surfaces a QMP failure as QmpError naming the command, and the VM keeps running", async () => {
    const dir = join(work, "bad-snapshot");
    // QEMU writes the device state in its runtime dir first: a directory there makes it fail.
    const blocker = join(booted.vm.spec.runtimeDir, "devstate.bin");
    mkdirSync(blocker);
    await assert.rejects(booted.vm.snapshot(dir, { resume: true }), (err: unknown) => {
      assert.ok(err instanceof QmpError);
      assert.equal(err.command, "xen-save-devices-state");
      return true;
    });
    assert.equal((await run(booted.slot, "echo alive")).trim(), "alive");
    rmSync(blocker, { recursive: true });
  });

  let r1: { vm: Vm; slot: NetworkSlot };
  let r2: { vm: Vm; slot: NetworkSlot };

  it("snapshots the booted VM and restores two independent VMs from it", async () => {
    snapshotA = join(work, "snap-a");
    const timing = await booted.vm.snapshot(snapshotA, { resume: false });
    assert.ok(timing.pausedMs > 0);
    await dispose(booted.vm);

    const restoreOne = async (id: string, warmed = false) => {
      const slot = await acquire();
      const prepared = await driver.prepareRestore(snapshotA, spec(id, slot));
      // A warmed VMM ran the guest once and stopped it; its start() is a bare `cont`.
      if (warmed)
        await prepared.warm(() => waitForEnvd(envdUrl(slot.hostAddress), 30_000).then(() => {}));
      const vm = track(await prepared.start());
      await waitForEnvd(envdUrl(slot.hostAddress), 30_000, vm);
      await initEnvd(envdUrl(slot.hostAddress), { defaultUser: "user" });
      return { vm, slot };
    };
    r1 = await restoreOne("r1");
    r2 = await restoreOne("r2", true);
    for (const { slot } of [r1, r2]) {
      assert.equal(
        (await run(slot, `cat /proc/${booted.sleepPid}/cmdline | tr '\\0' ' '`)).trim(),
        "sleep 3600",
      );
      assert.equal(
        await run(slot, "cat /home/user/disk.txt /tmp/tmpfs.txt"),
        "on-disk\nin-tmpfs\n",
      );
    }
    await run(r1.slot, "echo one > /home/user/only-r1.txt; echo one > /tmp/only-r1.txt");
    await run(r2.slot, "echo two > /home/user/only-r2.txt");
    assert.equal(
      await run(r2.slot, "ls /home/user/only-r1.txt /tmp/only-r1.txt 2>/dev/null | wc -l"),
      "0\n",
    );
    assert.equal(await run(r1.slot, "ls /home/user/only-r2.txt 2>/dev/null | wc -l"), "0\n");
  });

  it("refuses to restore a snapshot on a different machine shape", async () => {
    const slot = await acquire();
    const wrong = { ...spec("wrong", slot), shape: { vcpus: 1, memoryMiB: 1024 } };
    await assert.rejects(driver.restore(snapshotA, wrong), SnapshotMismatchError);
    await pool.release(slot);
    slots.delete(slot);
  });

  it("pauses and resumes a VM: same processes, files and tmpfs, clock corrected", async () => {
    const paused = join(work, "snap-paused");
    const timing = await r1.vm.snapshot(paused, { resume: false });
    assert.ok(timing.dirtyPages > 0, "a restored VM that ran has dirty pages");
    await dispose(r1.vm);
    await new Promise((resolve) => setTimeout(resolve, 2_000));

    const slot = await acquire();
    const vm = track(await driver.restore(paused, spec("r1b", slot)));
    const url = envdUrl(slot.hostAddress);
    await waitForEnvd(url, 30_000, vm);
    await initEnvd(url, { defaultUser: "user" });
    r1 = { vm, slot };
    assert.equal(
      (await run(slot, `cat /proc/${booted.sleepPid}/cmdline | tr '\\0' ' '`)).trim(),
      "sleep 3600",
    );
    assert.equal(
      await run(slot, "cat /home/user/only-r1.txt /tmp/only-r1.txt /tmp/tmpfs.txt"),
      "one\none\nin-tmpfs\n",
    );
    const guestSeconds = Number((await run(slot, "date +%s.%N")).trim());
    assert.ok(
      Math.abs(guestSeconds * 1000 - Date.now()) < 1_500,
      `guest clock is ${guestSeconds * 1000 - Date.now()} ms off`,
    );
  });

  it("forks a running VM: the source continues, the child starts from the capture", async () => {
    await run(r2.slot, "echo before-fork > /home/user/fork.txt");
    const capture = join(work, "snap-fork");
    const timing = await r2.vm.snapshot(capture, { resume: true });
    assert.ok(timing.pausedMs > 0);
    await run(r2.slot, "echo source-after > /home/user/fork.txt");

    const slot = await acquire();
    const child = track(await driver.restore(capture, spec("child", slot)));
    await waitForEnvd(envdUrl(slot.hostAddress), 30_000, child);
    await initEnvd(envdUrl(slot.hostAddress), { defaultUser: "user" });
    assert.equal(await run(slot, "cat /home/user/fork.txt"), "before-fork\n");
    await run(slot, "echo child-after > /home/user/fork.txt");
    assert.equal(await run(r2.slot, "cat /home/user/fork.txt"), "source-after\n");
    assert.equal(await run(slot, "cat /home/user/fork.txt"), "child-after\n");
    await dispose(child);
  });

  it("applies egress policy to a real guest, and never lets it reach the host", async () => {
    const { slot } = r2;
    assert.equal(
      await canConnect(slot, FAKENET.public1, FAKENET_PORT),
      true,
      "internet on by default",
    );
    await slot.setPolicy({ allowInternet: false, allowOut: [], denyOut: [] });
    assert.equal(await canConnect(slot, FAKENET.public1, FAKENET_PORT), false, "internet off");
    await slot.setPolicy({
      allowInternet: false,
      allowOut: [`${FAKENET.public1}/32`],
      denyOut: [],
    });
    assert.equal(
      await canConnect(slot, FAKENET.public1, FAKENET_PORT),
      true,
      "allowOut opens one address",
    );
    assert.equal(await canConnect(slot, FAKENET.public2, FAKENET_PORT), false, "only that one");
    await slot.setPolicy({ allowInternet: true, allowOut: [], denyOut: [] });
    for (const hostAddress of [slot.hostVethAddress, FAKENET.hostAddress, "127.0.0.1"]) {
      assert.equal(
        await canConnect(slot, hostAddress, HOST_PORT),
        false,
        `host service at ${hostAddress}`,
      );
    }
  });

  it("detects and reports a VMM that dies unexpectedly", async () => {
    process.kill(r2.vm.pid, "SIGKILL");
    const exit = await r2.vm.exited;
    assert.equal(exit.expected, false);
    assert.match(exit.reason, /QEMU exited unexpectedly \(signal SIGKILL\)/);
    await dispose(r2.vm);
    await dispose(r1.vm);
  });
});
