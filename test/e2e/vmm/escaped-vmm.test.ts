// An escaped VMM: a QEMU its guest took over writes what it likes into the files of its
// runtime directory (overlay, RAM file), keeps what descriptors it likes and answers QMP as
// it likes (the QMP bounds: src/vmm/qemu/qmp-client.test.ts). None of it may reach the
// host: QEMU's environment holds no secret of the server's; a file the VMM put in place of
// its overlay or RAM file (a FIFO, a link) is refused at once, never opened through; a qcow2
// naming a host file as its external data file, or with a feature Warren does not know, is
// refused at capture, restore and flatten, before anything opens it; a frozen disk its VMM
// still holds open for writing is not restored from; flattening runs unprivileged; the
// guest-RAM scan is bounded by the VM's memory.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { constants } from "node:fs";
import {
  link,
  mkdir,
  open,
  readdir,
  readFile,
  rename,
  rm,
  stat,
  truncate,
  writeFile,
} from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { GuestArtifacts } from "../../../src/host-setup/index.js";
import { NetnsSlotPool, type NetworkSlot } from "../../../src/network/index.js";
import {
  type SnapshotFile,
  SnapshotTamperedError,
  type Vm,
  VmmError,
  type VmSpec,
} from "../../../src/vmm/index.js";
import { Qcow2DiskChains, QemuDriver, qemuVersion } from "../../../src/vmm/qemu/index.js";
import { dirtyPages, findRamMapping } from "../../../src/vmm/qemu/memory-image.js";
import { createOverlay } from "../../../src/vmm/qemu/qcow2-overlay.js";
import { sealSnapshot } from "../../../src/vmm/qemu/sealed-files.js";
import {
  envdUrl,
  initEnvd,
  sandboxAt,
  slotVmSpec,
  type TestVmm,
  testVmm,
  waitForEnvd,
} from "../../helpers/guest.js";
import { leakCheck, qemuPidsIn, removeLeftovers } from "../../helpers/leak-check.js";
import { readHeaderCluster, withDataFile, withIncompatibleBit } from "../../helpers/qcow2-craft.js";
import { runEnv, runPoolOptions } from "../../helpers/run-env.js";
import { MiB, qemuIo, ScribeVm } from "../../helpers/scribe-vm.js";
import { ageFile, fileState, PYTHON, runAs, uidsOf, writeAs } from "../../helpers/vmm-process.js";

const SHAPE = { vcpus: 1, memoryMiB: 512 };
const SECRET_VAR = "WARREN_TEST_SERVER_SECRET";
const SECRET = "server-secret-5c9d1e";
/**
 * How long a refused capture may take: its own work (stopping the guest, saving its devices:
 * seconds on a busy TCG host), never a wait on a FIFO, which would last for ever.
 */
const PROMPT_MS = 60_000;

/** Settles with `promise`, or with "pending" once `ms` passed. */
function within<T>(
  promise: Promise<T>,
  ms: number,
): Promise<{ ok: T } | { err: unknown } | "pending"> {
  return Promise.race([
    promise.then(
      (ok) => ({ ok }),
      (err: unknown) => ({ err }),
    ),
    new Promise<"pending">((resolve) => setTimeout(() => resolve("pending"), ms)),
  ]);
}

/** Opens a FIFO's writing end and closes it: a reader blocked opening it goes on (to EOF). */
async function releaseFifo(path: string): Promise<void> {
  const handle = await open(path, constants.O_WRONLY | constants.O_NONBLOCK).catch(() => undefined);
  await handle?.close();
}

describe("an escaped VMM (real guests)", () => {
  let vmm: TestVmm;
  let images: GuestArtifacts;
  let driver: QemuDriver;
  let pool: NetnsSlotPool;
  let work: string;
  let hostFile: string;
  const vms = new Set<Vm>();
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
    await vm.snapshot(dir, { resume });
    sealed.set(dir, await driver.checksumSnapshot(dir));
  };
  /** A restore that must be refused; one that goes ahead is stopped, then fails the test. */
  const refusedRestore = async (dir: string, id: string, slot: NetworkSlot): Promise<unknown> => {
    const outcome = await driver.restore(dir, spec(id, slot)).then(
      (vm) => vm,
      (err: unknown) => ({ err }),
    );
    if ("err" in outcome) return outcome.err;
    await outcome.destroy();
    assert.fail(`the restore of ${dir} went ahead (QEMU ${outcome.pid})`);
  };
  /** The overlay a VM writes now (a fork capture switches it to disk-<n>.qcow2). */
  const overlayOf = async (vm: Vm) => {
    const names = (await readdir(vm.spec.runtimeDir)).filter((n) => /^disk(-\d+)?\.qcow2$/.test(n));
    const n = (name: string) => Number(/-(\d+)/.exec(name)?.[1] ?? 0);
    return join(vm.spec.runtimeDir, names.sort((a, b) => n(b) - n(a))[0] as string);
  };

  let ea: { vm: Vm; slot: NetworkSlot; uid: number };

  before(async () => {
    await removeLeftovers();
    vmm = await testVmm("test-escaped");
    ({ images, work } = vmm);
    driver = new QemuDriver({
      accel: vmm.driver.accel,
      disks: vmm.disks,
      qemuVersion: await qemuVersion(),
      identities: vmm.identities,
      cgroups: vmm.cgroups,
      sealedFiles: async (dir) => sealed.get(dir),
    });
    await mkdir(join(work, "run"));
    pool = new NetnsSlotPool({ ...runPoolOptions(), size: 0 });
    // A host file no guest may ever see or change: root's alone.
    hostFile = join(work, "host-file");
    await writeFile(hostFile, "HOST FILE: never a guest's\n", { mode: 0o600 });
    await ageFile(hostFile);
  });

  after(async () => {
    for (const vm of vms) await vm.destroy().catch(() => {});
    await pool?.close();
    if (work) await rm(work, { recursive: true, force: true });
    assert.deepEqual(await leakCheck(), [], "no namespace, link, rule or cgroup left behind");
    assert.deepEqual(await qemuPidsIn(runEnv().dataDir), [], "no QEMU left running");
  });

  it("starts QEMU with PATH as its whole environment, none of the server's", async () => {
    process.env[SECRET_VAR] = SECRET;
    const slot = await pool.acquire();
    let vm: Vm;
    try {
      vm = await driver.boot(spec("ea", slot));
    } finally {
      delete process.env[SECRET_VAR];
    }
    await ready(vm, slot);
    ea = { vm, slot, uid: (await uidsOf(vm.pid))[0] as number };
    const environ = (await readFile(`/proc/${vm.pid}/environ`, "utf8")).split("\0").filter(Boolean);
    assert.ok(!environ.some((entry) => entry.includes(SECRET)), "the server's secret is not there");
    assert.deepEqual(
      environ.map((entry) => entry.split("=")[0]),
      ["PATH"],
      `QEMU's environment: ${environ.join(" ")}`,
    );
  });

  let kept = 0;
  /**
   * Runs `body` with `path` (a file of VM ea's runtime dir) replaced by what `replace` makes
   * there as the VMM's uid; then puts the file back.
   */
  const replacing = async (path: string, replace: string, body: () => Promise<void>) => {
    const original = join(work, `kept-${++kept}`);
    await link(path, original);
    assert.equal(await runAs(ea.uid, ["sh", "-c", `rm ${path} && ${replace}`]), 0);
    try {
      await body();
    } finally {
      await rename(original, path);
    }
  };
  /**
   * A fork capture of ea into `dir` that must be refused at once. If it is still waiting
   * after PROMPT_MS, `release` lets it go on (so that the test ends) and the test fails.
   */
  const refusedFork = async (dir: string, release: () => void): Promise<unknown> => {
    const capture = ea.vm.snapshot(dir, { resume: true });
    const outcome = await within(capture, PROMPT_MS);
    if (outcome === "pending") {
      const releasing = setInterval(release, 200);
      await capture.catch(() => {});
      clearInterval(releasing);
      await rm(dir, { recursive: true, force: true });
      assert.fail(`the fork capture was still waiting on the FIFO after ${PROMPT_MS} ms`);
    }
    await rm(dir, { recursive: true, force: true });
    assert.ok("err" in outcome, "the capture was refused");
    return outcome.err;
  };

  it("refuses at once a fork capture of a boot VM whose RAM file the VMM replaced by a FIFO", async () => {
    const ram = join(ea.vm.spec.runtimeDir, "memory.img");
    await replacing(ram, `mkfifo ${ram}`, async () => {
      const err = await refusedFork(join(work, "snap-ram-fifo"), () => void releaseFifo(ram));
      assert.ok(err instanceof VmmError, String(err));
      assert.match(err.message, /not a plain file/);
    });
    assert.equal((await run(ea.slot, "echo alive")).trim(), "alive", "the VM runs on");
  });

  it("refuses a fork capture whose overlay the VMM replaced by a link to a host file, without opening it", async () => {
    const overlay = await overlayOf(ea.vm);
    await replacing(overlay, `ln -s ${hostFile} ${overlay}`, async () => {
      const before = await fileState(hostFile);
      const err = await refusedFork(join(work, "snap-link"), () => {});
      assert.ok(err instanceof VmmError, String(err));
      assert.match(err.message, /cannot open .*disk\.qcow2 safely/);
      assert.deepEqual(
        await fileState(hostFile),
        before,
        "the host file was neither read nor written",
      );
    });
  });

  it("refuses at once a fork capture whose overlay the VMM replaced by a FIFO; the server's file threads stay free", async () => {
    const overlay = await overlayOf(ea.vm);
    await replacing(overlay, `mkfifo ${overlay}`, async () => {
      // The VMM holds the FIFO open (for writing too): opening it does not wait (QEMU itself
      // reopens its image by name while saving its devices), reading it does.
      const writer = holdOpen(ea.uid, overlay);
      try {
        assert.ok(await writer.opened, "the VMM's uid holds the FIFO open");
        const err = await refusedFork(join(work, "snap-fifo"), () => writer.holder.kill("SIGKILL"));
        assert.ok(err instanceof VmmError, String(err));
        assert.match(err.message, /not a plain file/);
        // Every file thread is free: a handful of file operations at once finish at once.
        const started = performance.now();
        await Promise.all(Array.from({ length: 8 }, () => stat(work)));
        assert.ok(performance.now() - started < 1_000);
      } finally {
        await writer.close();
      }
    });
    // QEMU itself reopened its image by that name while saving its devices: this VM is done.
    await ea.vm.destroy();
    vms.delete(ea.vm);
  });

  let eb: { vm: Vm; slot: NetworkSlot; uid: number };
  /** A VM restored from eb's fork capture. */
  let child: { vm: Vm; slot: NetworkSlot };

  it("does not restore from a frozen disk its VMM still holds open for writing", async () => {
    const slot = await pool.acquire();
    const vm = await ready(await driver.boot(spec("eb", slot)), slot);
    eb = { vm, slot, uid: (await uidsOf(vm.pid))[0] as number };
    // The escaped VMM keeps a writable descriptor on its overlay, past the fork capture.
    const writer = holdOpen(eb.uid, await overlayOf(vm));
    const fork = join(work, "snap-fork");
    const slot2 = await pool.acquire();
    try {
      assert.ok(await writer.opened, "the VMM's uid holds its overlay open for writing");
      await capture(vm, fork, true);
      const err = await refusedRestore(fork, "ebf", slot2);
      assert.ok(err instanceof SnapshotTamperedError, String(err));
      assert.match(err.message, /open for writing/);
    } finally {
      await writer.close();
    }
    // Once nothing writes it, the fork restores.
    child = {
      vm: await ready(await driver.restore(fork, spec("ebf2", slot2)), slot2),
      slot: slot2,
    };
  });

  it("refuses a pause whose overlay the VMM rewrote to name a host file as its data file; the host file is neither read nor written", async () => {
    const overlay = await overlayOf(child.vm);
    const uid = (await uidsOf(child.vm.pid))[0] as number;
    const header = withDataFile(await readHeaderCluster(overlay), hostFile);
    assert.equal(await writeAs(uid, overlay, 0, header), 0, "the VMM owns its overlay");
    const before = await fileState(hostFile);
    const dir = join(work, "snap-data-file");
    await assert.rejects(capture(child.vm, dir, false), (err: unknown) => {
      assert.ok(err instanceof SnapshotTamperedError, String(err));
      assert.match(err.message, /external data file/);
      return true;
    });
    vms.delete(child.vm);
    assert.deepEqual(await fileState(hostFile), before);
  });

  it("refuses to restore a sealed disk that names a host data file or an unknown incompatible feature, before any QEMU starts", async () => {
    const paused = join(work, "snap-eb");
    await capture(eb.vm, paused, false);
    vms.delete(eb.vm);
    const disk = join(paused, "disk.qcow2");
    const original = await readHeaderCluster(disk);
    const cases: [string, Buffer, RegExp][] = [
      ["a host data file", withDataFile(original, hostFile), /external data file/],
      [
        "an unknown incompatible feature",
        withIncompatibleBit(original, 40),
        /incompatible feature/,
      ],
    ];
    for (const [what, header, message] of cases) {
      // Changed after its seal (by a descriptor its VMM kept, or sealed by an older Warren),
      // with records to match: only the header check stands in the way.
      const handle = await open(disk, "r+");
      await handle.write(header, 0, header.length, 0);
      await handle.close();
      sealed.set(paused, await driver.checksumSnapshot(paused));
      const qemus = (await qemuPidsIn(runEnv().dataDir)).length;
      const before = await fileState(hostFile);
      const err = await refusedRestore(paused, "ebr", eb.slot);
      assert.ok(err instanceof SnapshotTamperedError, `${what}: ${String(err)}`);
      assert.match(err.message, message, what);
      assert.equal((await qemuPidsIn(runEnv().dataDir)).length, qemus, "no QEMU started");
      assert.deepEqual(await fileState(hostFile), before, what);
    }
  });
});

/** A process of `uid` (a stand-in for the escaped VMM) holding `path` open read-write. */
function holdOpen(uid: number, path: string) {
  const script = `import os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
print("open", flush=True)
time.sleep(600)`;
  const holder = spawn(
    "setpriv",
    [`--reuid=${uid}`, `--regid=${uid}`, "--clear-groups", "--", PYTHON, "-c", script, path],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const exited = new Promise<void>((resolve) => holder.once("exit", () => resolve()));
  const opened = new Promise<boolean>((resolve) => {
    holder.stdout.once("data", () => resolve(true));
    void exited.then(() => resolve(false));
  });
  return {
    holder,
    opened,
    close: async () => {
      holder.kill("SIGKILL");
      await exited;
    },
  };
}

describe("an escaped VMM's disk, flattened and sealed (qcow2 files, no VM)", () => {
  let vmm: TestVmm;
  let root: string;
  let hostFile: string;
  let disks: Qcow2DiskChains;

  before(async () => {
    vmm = await testVmm("test-escaped-disk");
    root = vmm.work;
    disks = new Qcow2DiskChains({ imagesDir: root, identities: vmm.identities });
    hostFile = join(root, "host-file");
    await writeFile(hostFile, "HOST FILE: never a guest's\n", { mode: 0o600 });
  });
  after(() => rm(root, { recursive: true, force: true }));

  let n = 0;
  /** anchor <- parent <- top, sealed as captures are, on a raw base image in `root`. */
  const chain = async () => {
    const base = join(root, `base-${++n}.raw`);
    await writeFile(base, "");
    await truncate(base, 64 * MiB);
    const vm = new ScribeVm({ path: base, record: { image: base, format: "raw" } });
    const dirs = ["anchor", "parent", "top"].map((name) => join(root, `snapshots-${n}`, name));
    for (const dir of dirs) await vm.snapshot(dir);
    const [anchor, parent, top] = dirs as [string, string, string];
    return { anchor, parent, top };
  };

  it("refuses to flatten a disk that names a host data file, which is neither read nor written", async () => {
    const { anchor, top } = await chain();
    const disk = join(top, "disk.qcow2");
    const header = withDataFile(await readHeaderCluster(disk), hostFile);
    const handle = await open(disk, "r+");
    await handle.write(header, 0, header.length, 0);
    await handle.close();
    await ageFile(hostFile);
    const before = await fileState(hostFile);
    const refused = await disks.flatten(top, anchor).then(
      (plan) => plan.discard(),
      (err: unknown) => err,
    );
    assert.deepEqual(
      await fileState(hostFile),
      before,
      "the host file was neither read nor written",
    );
    assert.ok(refused instanceof VmmError, `the flatten was refused: ${String(refused)}`);
    assert.match(refused.message, /external data file/);
    assert.deepEqual(
      (await readdir(top)).filter((f) => f.endsWith(".flattened")),
      [],
    );
  });

  it("flattens with its image tool under a VMM uid, never root", async () => {
    const { anchor, parent, top } = await chain();
    // Enough in the middle layer for the copy to last a moment.
    await qemuIo(join(parent, "disk.qcow2"), `write -P 9 ${8 * MiB} ${40 * MiB}`, false);
    const uids = new Set<number>();
    let watching = true;
    const watch = (async () => {
      while (watching) {
        for (const pid of await readdir("/proc").catch(() => [] as string[])) {
          if (!/^\d+$/.test(pid)) continue;
          const cmd = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
          if (!/qemu/.test(cmd) || !(cmd.includes(top) || cmd.includes("warren-flatten"))) continue;
          const uid = await uidsOf(Number(pid)).catch(() => undefined);
          if (uid) uids.add(uid[0] as number);
        }
        await new Promise((resolve) => setTimeout(resolve, 1));
      }
    })();
    const plan = await disks.flatten(top, anchor);
    watching = false;
    await watch;
    await plan.discard();
    assert.ok(uids.size > 0, "the image tool was seen running");
    assert.ok(!uids.has(0), `the image tool ran as ${[...uids].join(", ")}`);
  });

  it("refuses to seal a disk with an incompatible feature it does not know", async () => {
    const dir = join(root, "unknown-feature");
    await mkdir(dir);
    const base = join(root, "seal-base.raw");
    await writeFile(base, "");
    await truncate(base, 64 * MiB);
    const disk = join(dir, "disk.qcow2");
    await createOverlay(disk, base, "raw");
    const header = withIncompatibleBit(await readHeaderCluster(disk), 40);
    const handle = await open(disk, "r+");
    await handle.write(header, 0, header.length, 0);
    await handle.close();
    await assert.rejects(sealSnapshot(dir), /unknown incompatible feature/);
  });

  it("bounds the guest-RAM scan by the VM's memory: a larger mapping of the RAM file is refused", async () => {
    // A stand-in for an escaped QEMU that mapped its RAM file again, 1 TiB long.
    const dir = join(root, "standin");
    await mkdir(dir);
    const file = join(dir, "memory.img");
    await writeFile(file, "");
    await truncate(file, 2 ** 40);
    const script = `import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
m = mmap.mmap(fd, 1 << 40, mmap.MAP_PRIVATE, mmap.PROT_READ)
print("mapped", flush=True)
time.sleep(600)`;
    const standIn = spawn(PYTHON, ["-c", script, file], { stdio: ["ignore", "pipe", "inherit"] });
    try {
      const mapped = await new Promise<boolean>((resolve) => {
        standIn.stdout.once("data", () => resolve(true));
        standIn.once("exit", () => resolve(false));
      });
      assert.ok(mapped, "the stand-in mapped its RAM file");
      const ram = SHAPE.memoryMiB * MiB;
      await assert.rejects(findRamMapping(standIn.pid as number, file, ram), (err: unknown) => {
        assert.ok(err instanceof VmmError, String(err));
        assert.match(err.message, /no mapping of .* as large as the guest's RAM/);
        return true;
      });
      const started = performance.now();
      await assert.rejects(
        dirtyPages(standIn.pid as number, { start: 0x7f0000000000, size: 2 ** 40 }, ram),
        /larger than the guest's RAM/,
      );
      assert.ok(performance.now() - started < 1_000, "refused before scanning");
    } finally {
      standIn.kill("SIGKILL");
    }
  });
});
