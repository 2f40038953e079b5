// Each QEMU contained as if it were already escaped: a uid of its own, chrooted
// into its runtime directory, in a cgroup of its own with limits from its shape, ranked by
// the OOM killer before the server; snapshot files root's, read-only, checksummed and
// checked before a restore; disk chains from Warren's records, never from a qcow2 header;
// read-only descriptors on everything shared; a bounded console.
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, rmSync } from "node:fs";
import { appendFile, open, readdir, readFile, readlink, rmdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import type { GuestArtifacts } from "../../../src/host-setup/index.js";
import { NetnsSlotPool, type NetworkSlot } from "../../../src/network/index.js";
import {
  type SnapshotFile,
  SnapshotTamperedError,
  type Vm,
  VmmError,
  type VmSpec,
} from "../../../src/vmm/index.js";
import {
  limitsFor,
  type Qcow2DiskChains,
  QemuDriver,
  VMM_OOM_SCORE_ADJ,
  VmCgroups,
  VmmIdentities,
} from "../../../src/vmm/qemu/index.js";
import {
  envdUrl,
  initEnvd,
  sandboxAt,
  slotVmSpec,
  testVmm,
  waitForEnvd,
} from "../../helpers/guest.js";
import { leakCheck, qemuPidsIn, removeLeftovers } from "../../helpers/leak-check.js";
import { RUN_VMM_UID_COUNT, runEnv, runPoolOptions, runVmmUidBase } from "../../helpers/run-env.js";
import { accessModes, runAs, uidsOf } from "../../helpers/vmm-process.js";

const execFileP = promisify(execFile);
const QEMU_INDEX = new URL("../../../src/vmm/qemu/index.ts", import.meta.url).pathname;
const SHAPE = { vcpus: 1, memoryMiB: 512 };

async function sha256(path: string): Promise<string> {
  return createHash("sha256")
    .update(await readFile(path))
    .digest("hex");
}

describe("VMM containment (real guests)", () => {
  let images: GuestArtifacts;
  let driver: QemuDriver;
  let disks: Qcow2DiskChains;
  let cgroups: VmCgroups | undefined;
  let pool: NetnsSlotPool;
  let work: string;
  const vms = new Set<Vm>();
  /** What the catalog would hold: each snapshot directory's sealed files. */
  const sealed = new Map<string, readonly SnapshotFile[]>();

  const spec = (id: string, slot: NetworkSlot): VmSpec => slotVmSpec(id, slot, images, work, SHAPE);
  const run = async (slot: NetworkSlot, cmd: string) =>
    (await sandboxAt(envdUrl(slot.hostAddress)).commands.run(cmd, { timeoutMs: 60_000 })).stdout;
  const ready = async (vm: Vm, slot: NetworkSlot) => {
    vms.add(vm);
    await waitForEnvd(envdUrl(slot.hostAddress), 180_000, vm);
    await initEnvd(envdUrl(slot.hostAddress), { defaultUser: "user" });
    return vm;
  };
  const capture = async (vm: Vm, dir: string, resume: boolean) => {
    const timing = await vm.snapshot(dir, { resume });
    sealed.set(dir, await driver.checksumSnapshot(dir));
    return timing;
  };

  let a: { vm: Vm; slot: NetworkSlot };
  let b: { vm: Vm; slot: NetworkSlot };
  let snapshot: string;

  before(async () => {
    await removeLeftovers();
    const vmm = await testVmm("test-contain");
    ({ images, work, cgroups } = vmm);
    // The server's driver checks every restore against the catalog's record of the files.
    disks = vmm.disks;
    driver = new QemuDriver({
      accel: vmm.driver.accel,
      disks,
      qemuVersion:
        (await execFileP("qemu-system-x86_64", ["--version"])).stdout.split("\n")[0] ?? "",
      identities: new VmmIdentities(runVmmUidBase(), RUN_VMM_UID_COUNT),
      cgroups,
      sealedFiles: async (dir) => sealed.get(dir),
    });
    mkdirSync(join(work, "run"));
    pool = new NetnsSlotPool({ ...runPoolOptions(), size: 0 });
  });

  after(async () => {
    for (const vm of vms) await vm.destroy().catch(() => {});
    await pool?.close();
    if (work) rmSync(work, { recursive: true, force: true });
    assert.deepEqual(await leakCheck(), [], "no namespace, link, rule or cgroup left behind");
    assert.deepEqual(await qemuPidsIn(runEnv().dataDir), [], "no QEMU left running");
  });

  it("runs each QEMU under a uid of its own, chrooted into its runtime dir, in a cgroup with its shape's limits, OOM-ranked above the server", async () => {
    const slotA = await pool.acquire();
    a = { vm: await ready(await driver.boot(spec("ca", slotA)), slotA), slot: slotA };
    const slotB = await pool.acquire();
    b = { vm: await ready(await driver.boot(spec("cb", slotB)), slotB), slot: slotB };
    const [uidA, uidB] = [(await uidsOf(a.vm.pid))[0], (await uidsOf(b.vm.pid))[0]];
    for (const [vm, uid] of [
      [a.vm, uidA],
      [b.vm, uidB],
    ] as const) {
      assert.deepEqual(await uidsOf(vm.pid), [uid, uid, uid, uid], "no way back to root");
      assert.ok(
        uid !== undefined && uid >= runVmmUidBase() && uid < runVmmUidBase() + RUN_VMM_UID_COUNT,
      );
      assert.equal(await readlink(`/proc/${vm.pid}/root`), vm.spec.runtimeDir, "chrooted");
      assert.equal(
        (await readFile(`/proc/${vm.pid}/oom_score_adj`, "utf8")).trim(),
        String(VMM_OOM_SCORE_ADJ),
      );
    }
    assert.notEqual(uidA, uidB, "two VMs never share a uid");

    if (!cgroups) {
      console.log("# SKIP cgroup limits: this host has no usable cgroup hierarchy");
      return;
    }
    const limits = limitsFor(SHAPE);
    const membership = await readFile(`/proc/${a.vm.pid}/cgroup`, "utf8");
    assert.match(membership, new RegExp(`/${runEnv().networkPrefix}-vms/ca$`, "m"));
    const [parent] = cgroups.parents;
    if (cgroups.version === 2) {
      const dir = join(parent as string, "ca");
      assert.equal(
        (await readFile(join(dir, "memory.max"), "utf8")).trim(),
        String(limits.memoryBytes),
      );
      assert.equal(
        (await readFile(join(dir, "cpu.max"), "utf8")).trim(),
        `${limits.cpuQuotaUs} ${limits.cpuPeriodUs}`,
      );
      assert.equal((await readFile(join(dir, "pids.max"), "utf8")).trim(), String(limits.pids));
    } else {
      const [memory, cpu, pids] = cgroups.parents.map((p) => join(p, "ca"));
      const read = (path: string) => readFile(path, "utf8").then((t) => t.trim());
      assert.equal(
        await read(join(memory as string, "memory.limit_in_bytes")),
        String(limits.memoryBytes),
      );
      assert.equal(await read(join(cpu as string, "cpu.cfs_quota_us")), String(limits.cpuQuotaUs));
      assert.equal(await read(join(pids as string, "pids.max")), String(limits.pids));
    }
    assert.deepEqual((await cgroups.list()).sort(), ["ca", "cb"]);
  });

  it("a VMM's uid can open nothing of another VM's, nor a sealed snapshot", async () => {
    const [uidA] = await uidsOf(a.vm.pid);
    const otherDisk = join(b.vm.spec.runtimeDir, "disk.qcow2");
    const otherRam = join(b.vm.spec.runtimeDir, "memory.img");
    for (const file of [otherDisk, otherRam])
      assert.notEqual(await runAs(uidA as number, ["head", "-c1", file]), 0, `${file} unreadable`);
    snapshot = join(work, "snap-b");
    await capture(b.vm, snapshot, false);
    vms.delete(b.vm);
    for (const name of await readdir(snapshot))
      assert.notEqual(await runAs(uidA as number, ["head", "-c1", join(snapshot, name)]), 0);
  });

  it("seals snapshots: root's, read-only, with checksums that match the files", async () => {
    const dir = await stat(snapshot);
    assert.equal(dir.uid, 0);
    assert.equal(dir.mode & 0o777, 0o700);
    const files = sealed.get(snapshot) ?? [];
    assert.deepEqual(files.map((f) => f.name).sort(), (await readdir(snapshot)).sort());
    for (const file of files) {
      const path = join(snapshot, file.name);
      const s = await stat(path);
      assert.equal(s.uid, 0, `${file.name} is root's`);
      assert.equal(s.mode & 0o777, 0o400, `${file.name} is read-only`);
      assert.equal(s.size, file.bytes);
      assert.equal(await sha256(path), file.sha256, `${file.name} checksum`);
    }
  });

  it("restores with the VMM holding the memory image and every backing disk read-only, and after a fork capture the frozen disk too", async () => {
    const slot = await pool.acquire();
    const vm = await ready(await driver.restore(snapshot, spec("cr", slot)), slot);
    assert.deepEqual(
      await accessModes(vm.pid, `${snapshot}/memory.img`),
      [0],
      "RAM image O_RDONLY",
    );
    assert.deepEqual(await accessModes(vm.pid, `${snapshot}/disk.qcow2`), [0], "backing O_RDONLY");
    assert.deepEqual(await accessModes(vm.pid, images.baseRootfs), [0]);
    const forked = join(work, "snap-fork");
    await capture(vm, forked, true);
    assert.deepEqual(
      await accessModes(vm.pid, `${vm.spec.runtimeDir}/disk.qcow2`),
      [0],
      "the frozen overlay is no longer writable by the VM that runs on",
    );
    assert.equal((await run(slot, "echo still-running")).trim(), "still-running");
    await vm.destroy();
    vms.delete(vm);
  });

  it("refuses to restore a snapshot whose files changed after sealing, leaving nothing behind", async () => {
    const slot = await pool.acquire();
    const devstate = join(snapshot, "devstate.bin");
    const before = await readFile(devstate);
    await appendFile(devstate, "x");
    const qemus = (await qemuPidsIn(runEnv().dataDir)).length;
    await assert.rejects(driver.restore(snapshot, spec("tampered", slot)), SnapshotTamperedError);
    assert.equal((await qemuPidsIn(runEnv().dataDir)).length, qemus, "no QEMU started");
    assert.deepEqual(await readdir(join(work, "run")).then((d) => d.includes("tampered")), false);
    // Put back byte for byte: the record matches again and the restore goes ahead.
    const handle = await open(devstate, "r+");
    await handle.truncate(before.length);
    await handle.close();
    const vm = await ready(await driver.restore(snapshot, spec("untampered", slot)), slot);
    await vm.destroy();
    vms.delete(vm);
  });

  it("takes a disk's backing chain from Warren's records: a header the VMM rewrote is never followed", async () => {
    await run(a.slot, "echo kept > /home/user/kept.txt && sync");
    // The VMM's uid rewrites its overlay's backing name to a host file, as an escaped QEMU could.
    const overlay = join(a.vm.spec.runtimeDir, "disk.qcow2");
    const [uidA] = await uidsOf(a.vm.pid);
    const header = Buffer.alloc(20);
    const handle = await open(overlay, "r");
    await handle.read(header, 0, 20, 0);
    await handle.close();
    const offset = Number(header.readBigUInt64BE(8));
    const evil = "/etc/shadow";
    const patch = `import os
fd = os.open(${JSON.stringify(overlay)}, os.O_WRONLY)
os.pwrite(fd, ${JSON.stringify(evil)}.encode(), ${offset})
os.pwrite(fd, (${evil.length}).to_bytes(4, "big"), 16)
os.close(fd)`;
    assert.equal(
      await runAs(uidA as number, ["/usr/bin/python3", "-c", patch]),
      0,
      "the VMM owns its overlay",
    );
    const paused = join(work, "snap-a");
    await capture(a.vm, paused, false);
    vms.delete(a.vm);
    const slot = await pool.acquire();
    const vm = await ready(await driver.restore(paused, spec("ca2", slot)), slot);
    assert.equal((await run(slot, "cat /home/user/kept.txt")).trim(), "kept");
    assert.deepEqual(await accessModes(vm.pid, "/etc/shadow"), [], "never opened");
    const above = join(work, "snap-a2");
    await capture(vm, above, false);
    vms.delete(vm);
    // qemu-img follows headers: flattening checks them against the records and refuses.
    await assert.rejects(disks.flatten(above, paused), (err: unknown) => {
      assert.ok(err instanceof VmmError);
      assert.match(err.message, /names \/etc\/shadow backing/);
      return true;
    });
  });

  it("keeps only the tail of a guest console that prints without end", async () => {
    const slot = await pool.acquire();
    const vm = await ready(await driver.restore(snapshot, spec("chatty", slot)), slot);
    await run(
      slot,
      "sudo sh -c 'head -c 300000 /dev/zero | tr \"\\\\0\" x > /dev/ttyS0; echo the-end > /dev/ttyS0'",
    );
    const tail = await vm.consoleTail();
    assert.ok(tail.length <= 64 * 1024, `console tail of ${tail.length} bytes`);
    assert.match(tail, /the-end/);
    await vm.destroy();
    vms.delete(vm);
  });

  it("kills every VMM of a server that dies, however it dies (the watchdog)", async (t) => {
    if (!cgroups) {
      t.skip("this host has no usable cgroup hierarchy");
      return;
    }
    // A stand-in server: puts a process in a VM cgroup, starts the watchdog, then is killed -9.
    const name = `${runEnv().networkPrefix}-wd`;
    const script = `
      import { spawn } from "node:child_process";
      import { writeFile } from "node:fs/promises";
      import { VmCgroups, startVmmWatchdog, limitsFor } from ${JSON.stringify(QEMU_INDEX)};
      const cgroups = VmCgroups.detect(${JSON.stringify(name)});
      const group = await cgroups.create("vm1", limitsFor({ vcpus: 1, memoryMiB: 64 }));
      const victim = spawn("sleep", ["600"], { stdio: "ignore", detached: true });
      for (const procs of group.procs) await writeFile(procs, String(victim.pid));
      startVmmWatchdog(cgroups, "/nonexistent");
      console.log(victim.pid);
      setInterval(() => {}, 1000);`;
    const server = spawn(
      process.execPath,
      ["--import", "tsx", "--input-type=module", "-e", script],
      {
        stdio: ["ignore", "pipe", "inherit"],
      },
    );
    const victim = await new Promise<number>((resolve, reject) => {
      server.stdout.once("data", (chunk: Buffer) => resolve(Number(chunk.toString().trim())));
      server.once("exit", (code) => reject(new Error(`stand-in server exited ${code}`)));
    });
    const alive = (pid: number) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    assert.ok(alive(victim));
    server.kill("SIGKILL");
    const deadline = Date.now() + 5_000;
    while (alive(victim) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.equal(alive(victim), false, "the VMM died with its server");
    const sweeper = VmCgroups.detect(name);
    await sweeper?.sweep();
    for (const parent of sweeper?.parents ?? []) await rmdir(parent);
  });

  it("sweeps a VM cgroup a crash left half-removed (gone from one hierarchy, still in others)", async (t) => {
    const name = `${runEnv().networkPrefix}-half`;
    const groups = VmCgroups.detect(name);
    if (!groups || groups.parents.length < 2) {
      t.skip("cgroup v1 only: under v2 a VM has one group, removed at once");
      return;
    }
    await groups.create("vm1", limitsFor({ vcpus: 1, memoryMiB: 64 }));
    // The server died between the rmdir of the first hierarchy's group and the next.
    await rmdir(join(groups.parents[0] as string, "vm1"));
    assert.deepEqual(await groups.list(), ["vm1"], "listed while any hierarchy still holds it");
    await groups.sweep();
    for (const parent of groups.parents) {
      assert.deepEqual(await readdir(parent).then((names) => names.filter((n) => n === "vm1")), []);
      await rmdir(parent);
    }
  });
});
