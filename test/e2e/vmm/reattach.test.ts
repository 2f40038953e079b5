// A running VM let go of (`QemuVm.detach()`: QMP closed, QEMU left running) and made again
// from its record alone (`QemuDriver.reattach`), by a second driver standing in for the next
// server (its own uid pool over the same range, the same cgroups): the same QEMU and guest,
// its memory and processes intact, and everything a VM does still working. Also a fork
// capture cut between "switching the disk" and "switched" in its record, either way.
import assert from "node:assert/strict";
import { existsSync, mkdirSync, rmSync } from "node:fs";
import { readFile, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { GuestArtifacts } from "../../../src/host-setup/index.js";
import { NetnsSlotPool } from "../../../src/network/index.js";
import { type Vm, VmmError } from "../../../src/vmm/index.js";
import {
  type Qcow2DiskChains,
  QemuDriver,
  type QemuVm,
  qemuVersion,
  type VmCgroups,
  VmmIdentities,
  type VmRecord,
} from "../../../src/vmm/qemu/index.js";
import { runInGuest, SlotGuests, testVmm } from "../../helpers/guest.js";
import { leakCheck, qemuPidsIn, removeLeftovers } from "../../helpers/leak-check.js";
import { RUN_VMM_UID_COUNT, runEnv, runPoolOptions, runVmmUidBase } from "../../helpers/run-env.js";
import { runAs, uidsOf } from "../../helpers/vmm-process.js";

const SHAPE = { vcpus: 1, memoryMiB: 512 };
/** A guest process counting in its memory (a tmpfs file), as a sandbox's loop would. */
const COUNTER =
  "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.2; done' >/dev/null 2>&1 </dev/null & echo $!";

describe("reattach: a VM made again from its record (real guests)", () => {
  let images: GuestArtifacts;
  let disks: Qcow2DiskChains;
  let cgroups: VmCgroups | undefined;
  /** The server that started the VM, and the next one. */
  let first: QemuDriver;
  let next: QemuDriver;
  let nextIds: VmmIdentities;
  /** What `next` was told of each fork capture (its catalog would have saved them). */
  const saved: VmRecord[] = [];
  let pool: NetnsSlotPool;
  let work: string;
  const guests = new SlotGuests(() => ({ pool, images, work }), SHAPE);
  const { vms } = guests;
  const spec = (id: string) => guests.spec(id);
  const url = (vm: Vm) => guests.url(vm);
  const ready = <T extends Vm>(vm: T) => guests.ready(vm);
  const inGuest = (vm: Vm, cmd: string) => runInGuest(url(vm), cmd);
  /** The counter's value (read again while the loop is rewriting its file). */
  const count = async (vm: Vm) =>
    Number(await inGuest(vm, "until [ -s /tmp/count ]; do sleep 0.05; done; cat /tmp/count"));
  /** What a restart in between would have kept: the record as JSON. */
  const stored = (record: VmRecord) => JSON.parse(JSON.stringify(record)) as unknown;

  let source: QemuVm;
  let loopPid: string;
  let record: VmRecord;

  before(async () => {
    await removeLeftovers();
    const vmm = await testVmm("test-reattach");
    ({ images, work, disks, cgroups } = vmm);
    first = vmm.driver;
    nextIds = new VmmIdentities(runVmmUidBase(), RUN_VMM_UID_COUNT);
    next = new QemuDriver({
      accel: first.accel,
      qemuVersion: await qemuVersion(),
      disks,
      identities: nextIds,
      cgroups,
      recordChanged: async (r) => {
        saved.push(stored(r) as VmRecord);
      },
    });
    mkdirSync(join(work, "run"));
    pool = new NetnsSlotPool({ ...runPoolOptions(), size: 0 });
  });

  after(async () => {
    await guests.close();
    await first?.killOrphans(join(work, "run"));
    await pool?.close();
    if (work) rmSync(work, { recursive: true, force: true });
    assert.deepEqual(await leakCheck(), [], "no namespace, link, rule or cgroup left behind");
    assert.deepEqual(await qemuPidsIn(runEnv().dataDir), [], "no QEMU left running");
  });

  it("binds QMP outside the VMM's jail, where its uid cannot connect", async () => {
    source = (await ready(await first.boot(await spec("src")))) as QemuVm;
    record = source.record();
    const { qmpSocket } = record;
    assert.ok(!qmpSocket.startsWith(`${source.spec.runtimeDir}/`), qmpSocket);
    const dir = await stat(dirname(qmpSocket));
    assert.equal(dir.uid, 0);
    assert.equal(dir.mode & 0o777, 0o700);
    assert.ok((await stat(qmpSocket)).isSocket());
    const [uid] = await uidsOf(source.pid);
    const connect = `import socket; socket.socket(socket.AF_UNIX).connect(${JSON.stringify(qmpSocket)})`;
    assert.notEqual(await runAs(uid as number, ["/usr/bin/python3", "-c", connect]), 0);
    assert.equal(await runAs(0, ["/usr/bin/python3", "-c", "pass"]), 0, "the probe itself runs");
  });

  it("lets go of a VM that keeps running: QMP closed, everything but its record refused", async () => {
    await inGuest(source, "printf kept > /tmp/memory");
    loopPid = (await inGuest(source, COUNTER)).trim();
    assert.match(loopPid, /^\d+$/);
    assert.match(await source.consoleTail(), /\S/, "the console shows the boot");
    record = source.record();
    source.detach();
    vms.delete(source);
    await assert.rejects(source.snapshot(join(work, "never"), { resume: true }), /detached/);
    await assert.rejects(source.destroy(), /detached/);
    const before = await count(source);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    assert.ok((await count(source)) > before, "the guest runs on, unwatched");
    // Printed while no one drains it: QEMU's ring keeps it for the next owner.
    await inGuest(source, "echo while-detached | sudo tee /dev/ttyS0 >/dev/null");
  });

  it("refuses a record of another version, another process, or a QEMU that is gone", async () => {
    const proc = source.proc;
    const bumped = { ...(stored(record) as object), version: 2 };
    await assert.rejects(next.reattach(bumped, proc), /version 2; this server reads version 1/);
    const other = { ...(stored(record) as object), startTime: record.startTime + 1 };
    await assert.rejects(next.reattach(other, proc), /is now another process/);
    const elsewhere = { ...(stored(record) as object), pid: proc.pid + 1_000_000 };
    await assert.rejects(next.reattach(elsewhere, proc), /record names pid/);
    const gone = { ...proc, pid: proc.pid, running: false };
    await assert.rejects(
      next.reattach(stored(record), gone as typeof proc),
      (err: unknown) => err instanceof VmmError && /is gone: it exited/.test(err.message),
    );
  });

  let vm: QemuVm;

  it("makes it again from its record: same QEMU, memory and processes intact", async (t) => {
    const started = performance.now();
    const reattached = await next.reattach(stored(record), source.proc);
    t.diagnostic(`reattach: ${(performance.now() - started).toFixed(1)} ms`);
    ({ vm } = reattached);
    vms.add(vm);
    assert.equal(reattached.running, true);
    assert.equal(reattached.interruptedCapture, undefined);
    assert.equal(vm.pid, source.pid, "the same QEMU");
    assert.deepEqual(await uidsOf(vm.pid), Array(4).fill(record.identity?.uid));
    if (cgroups) {
      const membership = await readFile(`/proc/${vm.pid}/cgroup`, "utf8");
      assert.match(membership, new RegExp(`/${runEnv().networkPrefix}-vms/src$`, "m"));
    }
    assert.equal(await inGuest(vm, "cat /tmp/memory"), "kept");
    assert.equal((await inGuest(vm, `kill -0 ${loopPid} && echo alive`)).trim(), "alive");
    assert.deepEqual(vm.host, record.host, "its captures record the QEMU that runs it");
    assert.match(await vm.consoleTail(), /while-detached/, "the console kept what it printed");
    await inGuest(vm, "echo after-reattach | sudo tee /dev/ttyS0 >/dev/null");
    assert.match(await vm.consoleTail(), /after-reattach/);
    await assert.rejects(next.reattach(stored(record), source.proc), /attached here already/);
  });

  let fork: string;

  it("fork-captures it, and a child restored from the capture continues from there", async () => {
    fork = join(work, "fork1");
    await vm.snapshot(fork, { resume: true });
    // Told before QEMU switched the root disk, and once it had.
    assert.deepEqual(
      saved.map((r) => [r.rootNode, r.captures, r.pendingCapture?.dir]),
      [
        ["root", 1, fork],
        ["root-1", 1, undefined],
      ],
    );
    const child = await ready(await next.restore(fork, await spec("child")));
    assert.equal(await inGuest(child, "cat /tmp/memory"), "kept");
    assert.equal((await inGuest(child, `kill -0 ${loopPid} && echo alive`)).trim(), "alive");
    const before = await count(vm);
    await inGuest(vm, "printf source > /tmp/memory");
    assert.equal(await inGuest(child, "cat /tmp/memory"), "kept", "apart from its source");
    assert.ok((await count(vm)) >= before);
    await child.destroy();
    vms.delete(child);
  });

  it("settles a capture cut short after QEMU switched disks: the VM stands on the capture's", async () => {
    const intent = saved[0] as VmRecord; // what a server dying mid-switch would have left
    vm.detach();
    vms.delete(vm);
    const reattached = await next.reattach(intent, vm.proc);
    assert.deepEqual(reattached.interruptedCapture, { dir: fork, switched: true });
    ({ vm } = reattached);
    vms.add(vm);
    const now = vm.record();
    assert.equal(now.rootNode, "root-1");
    assert.equal(now.pendingCapture, undefined);
    assert.deepEqual(now.backing, {
      file: join(fork, "disk.qcow2"),
      format: "qcow2",
      snapshotDir: fork,
    });
    assert.equal(await inGuest(vm, "cat /tmp/memory"), "source");
    // What it writes goes on top of the capture's disk: a second capture stands on it.
    await inGuest(vm, "echo on-disk > /home/user/written && sync");
    const second = join(work, "fork2");
    await vm.snapshot(second, { resume: true });
    const child = await ready(await next.restore(second, await spec("child2")));
    assert.equal((await inGuest(child, "cat /home/user/written")).trim(), "on-disk");
    await child.destroy();
    vms.delete(child);
  });

  it("settles a capture cut short before the switch: nothing changed, the next capture works", async () => {
    const record = vm.record();
    const cut = join(work, "fork3-cut");
    vm.detach();
    vms.delete(vm);
    const intent = { ...record, captures: record.captures + 1, pendingCapture: { dir: cut } };
    const reattached = await next.reattach(stored(intent), vm.proc);
    assert.deepEqual(reattached.interruptedCapture, { dir: cut, switched: false });
    ({ vm } = reattached);
    vms.add(vm);
    assert.equal(vm.record().rootNode, record.rootNode);
    assert.equal(vm.record().captures, record.captures + 1);
    await vm.snapshot(join(work, "fork3"), { resume: true });
    assert.equal(vm.record().rootNode, `root-${record.captures + 2}`);
  });

  it("pauses and resumes it: the VMM exits, gives back what it held, and the guest goes on", async () => {
    const { qmpSocket } = vm.record();
    const inUse = nextIds.inUse;
    const paused = join(work, "pause");
    await vm.snapshot(paused, { resume: false });
    const exit = await vm.exited;
    assert.equal(exit.expected, true, exit.reason);
    assert.equal(nextIds.inUse, inUse - 1, "its uid is free again");
    const group = cgroups ? join(cgroups.parents[0] as string, "src") : undefined;
    for (let i = 0; i < 200 && (existsSync(qmpSocket) || (group && existsSync(group))); i++)
      await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(existsSync(qmpSocket), false, "its QMP socket is gone");
    if (group) assert.equal(existsSync(group), false, "its cgroup is gone");
    await vm.destroy();
    vms.delete(vm);
    const resumed = await ready(await next.restore(paused, await spec("resumed")));
    assert.equal(await inGuest(resumed, "cat /tmp/memory"), "source");
    assert.equal((await inGuest(resumed, "cat /home/user/written")).trim(), "on-disk");
    assert.equal((await inGuest(resumed, `kill -0 ${loopPid} && echo alive`)).trim(), "alive");
  });
});
