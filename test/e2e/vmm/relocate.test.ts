// Snapshots copied to another directory (another node's data dir in a cluster) restore there:
// a template-like full capture, an incremental pause on it (memory diff + disk layer) and a
// fork capture, copied side by side into another root while the originals are gone. Each
// snapshot names what it stands on by sibling name (format 4); a copy without an ancestor
// is refused at once, naming it.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import { mkdir, readdir, readFile, readlink, rename, stat } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import type { GuestArtifacts } from "../../../src/host-setup/index.js";
import { NetnsSlotPool, type NetworkSlot } from "../../../src/network/index.js";
import {
  type SnapshotFile,
  type SnapshotMeta,
  SnapshotTamperedError,
  type Vm,
  VmmError,
} from "../../../src/vmm/index.js";
import { type Qcow2DiskChains, QemuDriver, qemuVersion } from "../../../src/vmm/qemu/index.js";
import { headerBacking } from "../../../src/vmm/qemu/qcow2-overlay.js";
import {
  envdUrl,
  initEnvd,
  runInGuest,
  sandboxAt,
  slotVmSpec,
  testVmm,
  waitForEnvd,
} from "../../helpers/guest.js";
import { leakCheck, qemuPidsIn, removeLeftovers } from "../../helpers/leak-check.js";
import { runEnv, runPoolOptions } from "../../helpers/run-env.js";

const execFileP = promisify(execFile);
const SHAPE = { vcpus: 1, memoryMiB: 512 };
const SNAPSHOTS = ["tpl", "fork", "pause"];

/** Every path a process holds open or mapped (descriptors and /proc/<pid>/maps). */
async function openPaths(pid: number): Promise<string[]> {
  const fds = await readdir(`/proc/${pid}/fd`);
  const links = await Promise.all(
    fds.map((fd) => readlink(`/proc/${pid}/fd/${fd}`).catch(() => "")),
  );
  const maps = (await readFile(`/proc/${pid}/maps`, "utf8")).split("\n");
  return [...links, ...maps.map((line) => line.split(/\s+/).slice(5).join(" "))].filter(Boolean);
}

async function metaOf(dir: string): Promise<SnapshotMeta> {
  return JSON.parse(await readFile(join(dir, "meta.json"), "utf8")) as SnapshotMeta;
}

describe("snapshots relocated to another directory restore there (real guests)", () => {
  let images: GuestArtifacts;
  let driver: QemuDriver;
  let disks: Qcow2DiskChains;
  let pool: NetnsSlotPool;
  let work: string;
  /** Node A's snapshots, then node B's copies of them. */
  let a: string;
  let b: string;
  const vms = new Set<Vm>();
  const slots: NetworkSlot[] = [];
  /** What the catalog (or the shared store's manifests) holds: each directory's sealed files. */
  const sealed = new Map<string, readonly SnapshotFile[]>();

  before(async () => {
    await removeLeftovers();
    const vmm = await testVmm("test-relocate");
    ({ images, work } = vmm);
    // Every restore checked against the recorded checksums, as the server's driver does.
    disks = vmm.disks;
    driver = new QemuDriver({
      accel: vmm.driver.accel,
      disks,
      qemuVersion: await qemuVersion(),
      identities: vmm.identities,
      cgroups: vmm.cgroups,
      sealedFiles: async (dir) => sealed.get(dir),
    });
    mkdirSync(join(work, "run"));
    a = join(work, "node-a", "snapshots");
    b = join(work, "node-b", "snapshots");
    await mkdir(a, { recursive: true });
    pool = new NetnsSlotPool({ ...runPoolOptions(), size: 0 });
  });

  after(async () => {
    for (const vm of vms) await vm.destroy().catch(() => {});
    for (const slot of slots) await pool.release(slot).catch(() => {});
    await pool?.close();
    if (work) rmSync(work, { recursive: true, force: true });
    assert.deepEqual(await leakCheck(), [], "no namespace, link, rule or cgroup left behind");
    assert.deepEqual(await qemuPidsIn(runEnv().dataDir), [], "no QEMU left running");
  });

  const start = async (id: string, snapshot?: string) => {
    const slot = await pool.acquire();
    slots.push(slot);
    const spec = slotVmSpec(id, slot, images, work, SHAPE);
    const vm = await (snapshot ? driver.restore(snapshot, spec) : driver.boot(spec));
    vms.add(vm);
    const url = envdUrl(slot.hostAddress);
    await waitForEnvd(url, 180_000, vm);
    await initEnvd(url, { defaultUser: "user" });
    return { vm, url };
  };
  const capture = async (vm: Vm, dir: string, resume: boolean) => {
    await vm.snapshot(dir, { resume });
    if (!resume) await destroy(vm);
    sealed.set(dir, await driver.checksumSnapshot(dir));
  };
  const destroy = async (vm: Vm) => {
    await vm.destroy();
    vms.delete(vm);
  };

  let sleeper: string;

  it("captures a full snapshot, a fork capture and an incremental pause on them, naming each other by sibling name", async () => {
    const source = await start("source");
    const handle = await sandboxAt(source.url).commands.run("sleep 3600", {
      background: true,
      timeoutMs: 0,
    });
    sleeper = String(handle.pid);
    await runInGuest(source.url, "echo template > /home/user/before.txt; sync");
    await capture(source.vm, join(a, "tpl"), false);

    const run = await start("run", join(a, "tpl"));
    await runInGuest(run.url, "echo fork > /home/user/stage.txt; echo fork > /tmp/stage.txt");
    await capture(run.vm, join(a, "fork"), true);
    await runInGuest(run.url, "echo pause > /home/user/stage.txt; echo pause > /tmp/stage.txt");
    await capture(run.vm, join(a, "pause"), false);

    assert.deepEqual((await metaOf(join(a, "tpl"))).memoryImage, { file: "memory.img" });
    const pause = await metaOf(join(a, "pause"));
    assert.ok(pause.diffPages > 0, "the pause holds a memory diff");
    assert.deepEqual(pause.memoryImage, { snapshot: "tpl", file: "memory.img" });
    assert.deepEqual(pause.diskBacking, { snapshot: "fork", file: "disk.qcow2", format: "qcow2" });
    assert.deepEqual((await metaOf(join(a, "fork"))).diskBacking, {
      snapshot: "tpl",
      file: "disk.qcow2",
      format: "qcow2",
    });
    for (const name of SNAPSHOTS) {
      const text = await readFile(join(a, name, "meta.json"), "utf8");
      assert.ok(!text.includes(a), `${name}'s meta.json names no path of node A's`);
    }
    assert.equal(await headerBacking(join(a, "pause", "disk.qcow2")), "../fork/disk.qcow2");
    assert.equal(await headerBacking(join(a, "fork", "disk.qcow2")), "../tpl/disk.qcow2");
  });

  it("restores the pause and a fork child from copies beside each other elsewhere, the originals gone", async () => {
    await mkdir(join(work, "node-b"));
    await execFileP("cp", ["-a", a, b]);
    // Node A's directory is out of reach: nothing may still resolve to it.
    await rename(join(work, "node-a"), join(work, "node-a-gone"));
    for (const name of SNAPSHOTS) {
      sealed.set(join(b, name), sealed.get(join(a, name)) ?? []);
      const memory = await stat(join(b, name, "meta.json"));
      assert.equal(memory.uid, 0);
      assert.equal(memory.mode & 0o777, 0o400, "copied sealed: root's, read-only");
    }

    const paused = await start("paused", join(b, "pause"));
    assert.equal(
      await runInGuest(paused.url, "cat /home/user/before.txt /home/user/stage.txt /tmp/stage.txt"),
      "template\npause\npause\n",
    );
    assert.equal(
      (await runInGuest(paused.url, `tr '\\0' ' ' < /proc/${sleeper}/cmdline`)).trim(),
      "sleep 3600",
      "a process started before the template capture still runs",
    );
    const paths = await openPaths(paused.vm.pid);
    assert.ok(
      paths.some((p) => p.startsWith(join(b, "tpl"))),
      "the memory image is node B's copy",
    );
    assert.deepEqual(
      paths.filter((p) => p.includes("node-a")),
      [],
      "nothing of node A's is open",
    );

    // A capture stands only on snapshots beside it: elsewhere it is refused, the VM runs on.
    await assert.rejects(
      paused.vm.snapshot(join(work, "elsewhere", "x"), { resume: true }),
      (err: unknown) => err instanceof VmmError && /which is not beside it/.test(err.message),
    );
    assert.equal((await runInGuest(paused.url, "echo alive")).trim(), "alive");
    await destroy(paused.vm);

    const child = await start("child", join(b, "fork"));
    assert.equal(
      await runInGuest(child.url, "cat /home/user/before.txt /home/user/stage.txt /tmp/stage.txt"),
      "template\nfork\nfork\n",
    );
    assert.equal(
      (await runInGuest(child.url, `tr '\\0' ' ' < /proc/${sleeper}/cmdline`)).trim(),
      "sleep 3600",
    );
    await destroy(child.vm);
  });

  it("flattens a relocated chain: the headers name siblings, as the records do", async () => {
    const plan = await disks.flatten(join(b, "pause"), join(b, "tpl"));
    sealed.set(join(b, "pause"), plan.files);
    await plan.commit();
    assert.equal(await headerBacking(join(b, "pause", "disk.qcow2")), "../tpl/disk.qcow2");
    const chain = await disks.readChain(join(b, "pause"));
    assert.deepEqual(
      chain.disk.map((layer) => layer.file),
      [join(b, "pause", "disk.qcow2"), join(b, "tpl", "disk.qcow2"), images.baseRootfs],
    );
    const flat = await start("flat", join(b, "pause"));
    assert.equal(await runInGuest(flat.url, "cat /home/user/stage.txt"), "pause\n");
    await destroy(flat.vm);
  });

  it("refuses a copy whose ancestor was not copied beside it, at once and naming it", async () => {
    const c = join(work, "node-c", "snapshots");
    await mkdir(c, { recursive: true });
    await execFileP("cp", ["-a", join(b, "fork"), join(c, "fork")]);
    sealed.set(join(c, "fork"), sealed.get(join(b, "fork")) ?? []);
    const slot = await pool.acquire();
    slots.push(slot);
    const qemus = (await qemuPidsIn(runEnv().dataDir)).length;
    const started = performance.now();
    await assert.rejects(
      driver.restore(join(c, "fork"), slotVmSpec("orphan", slot, images, work, SHAPE)),
      (err: unknown) => {
        assert.ok(err instanceof SnapshotTamperedError);
        assert.match(err.message, /stands on tpl \(its memory image\), which is not beside it/);
        assert.match(err.message, new RegExp(`${join(c, "tpl")} is missing`));
        return true;
      },
    );
    assert.ok(performance.now() - started < 5_000, "refused at once, not after a hang");
    assert.equal((await qemuPidsIn(runEnv().dataDir)).length, qemus, "no QEMU started");
    assert.equal((await readdir(join(work, "run"))).includes("orphan"), false);
  });
});
