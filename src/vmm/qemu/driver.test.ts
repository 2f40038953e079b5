import assert from "node:assert/strict";
import { access, mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import type { VmSpec } from "../driver.js";
import { SnapshotMismatchError, SnapshotTamperedError } from "../errors.js";
import { cpuModel } from "./args.js";
import { QemuDriver } from "./driver.js";
import { Qcow2DiskChains } from "./qcow2-disk-chains.js";
import { SNAPSHOT_FORMAT_VERSION, type SnapshotMeta, writeSnapshotMeta } from "./snapshot-meta.js";
import { VmmIdentities } from "./vmm-ids.js";

const spec: VmSpec = {
  id: "t",
  shape: { vcpus: 1, memoryMiB: 256 },
  images: {
    kernel: "/k",
    kernelVersion: "6.1",
    fingerprint: "f",
    initramfs: "/i",
    agentDrive: "/a",
  },
  baseDisk: "/base.ext4",
  network: { kind: "none" },
  runtimeDir: "/run/t",
  guestIp: "169.254.0.21/30",
  guestGateway: "169.254.0.22",
};

const meta = (kernelCommandLine?: string): SnapshotMeta => ({
  formatVersion: SNAPSHOT_FORMAT_VERSION,
  accel: "tcg",
  cpuModel: cpuModel("tcg"),
  qemuVersion: "q",
  kernel: "6.1",
  images: "f",
  kernelCommandLine,
  shape: spec.shape,
  memoryImage: { file: "memory.img" },
  diffPages: 0,
  deviceStateFile: "devstate.bin",
  diskFile: "disk.qcow2",
  diskBacking: { image: "/base.ext4", format: "raw" },
  createdAt: new Date(0).toISOString(),
});

/** Disk chains for drivers that never flatten (no uid is ever taken). */
const unusedChains = () =>
  new Qcow2DiskChains({ imagesDir: "/images", identities: new VmmIdentities(100_000, 16) });

describe("QemuDriver.bootDrift", () => {
  const dirs: string[] = [];
  after(() => Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true }))));
  const snapshotWith = async (commandLine?: string) => {
    const dir = await mkdtemp(join(tmpdir(), "warren-drift-"));
    dirs.push(dir);
    await writeSnapshotMeta(dir, meta(commandLine));
    return dir;
  };
  const driver = (options: { guestAslr?: boolean; tscKhz?: number; qemuVersion?: string } = {}) =>
    new QemuDriver({
      accel: "tcg",
      qemuVersion: "q",
      disks: unusedChains(),
      tscKhz: 1_000_000,
      ...options,
    });
  /** The command line `d` would boot with, read from the drift it reports on an unrecorded one. */
  const bootsWith = async (d: QemuDriver) => {
    const reason = await d.bootDrift(await snapshotWith(), spec);
    return /a boot here now uses "(.*)"$/.exec(reason ?? "")?.[1] ?? "";
  };

  it("finds none when a boot now would use the recorded command line", async () => {
    const now = await bootsWith(driver());
    assert.match(now, /norandmaps/, "TCG guests run without ASLR by default");
    assert.equal(await driver().bootDrift(await snapshotWith(now), spec), undefined);
  });

  it("names both command lines when a setting changed it", async () => {
    const off = await bootsWith(driver({ guestAslr: false }));
    const reason = await driver({ guestAslr: true }).bootDrift(await snapshotWith(off), spec);
    assert.match(reason ?? "", /booted with kernel command line ".*norandmaps.*", a boot here now/);
    assert.doesNotMatch(reason?.split("now uses")[1] ?? "", /norandmaps/);
  });

  it("ignores the host's TSC reading", async () => {
    const now = await bootsWith(driver({ tscKhz: 2_096_023 }));
    assert.match(now, /tsc_early_khz=2096023/);
    const other = driver({ tscKhz: 2_095_999 });
    assert.equal(await other.bootDrift(await snapshotWith(now), spec), undefined);
  });

  it("refuses a snapshot this host cannot restore (another QEMU: an upgrade), naming why", async () => {
    const now = await bootsWith(driver());
    await assert.rejects(
      driver({ qemuVersion: "q2" }).bootDrift(await snapshotWith(now), spec),
      (err: Error) =>
        err instanceof SnapshotMismatchError && /QEMU version was q, here q2/.test(err.message),
    );
  });

  it("counts a snapshot without a recorded command line as drifted", async () => {
    assert.match((await driver().bootDrift(await snapshotWith(), spec)) ?? "", /not recorded/);
  });
});

describe("QemuDriver.restore of a snapshot moved without its ancestors", () => {
  it("refuses it, naming the missing one, before it makes or spawns anything", async () => {
    const root = await mkdtemp(join(tmpdir(), "warren-moved-"));
    try {
      const pause = join(root, "snapshots", "pause");
      await mkdir(pause, { recursive: true });
      await writeSnapshotMeta(pause, {
        ...meta(),
        memoryImage: { snapshot: "tpl", file: "memory.img" },
        diskBacking: { snapshot: "tpl", file: "disk.qcow2", format: "qcow2" },
      });
      const driver = new QemuDriver({
        accel: "tcg",
        qemuVersion: "q",
        disks: unusedChains(),
        tscKhz: 1_000_000,
      });
      const runtimeDir = join(root, "run", "t");
      await assert.rejects(driver.restore(pause, { ...spec, runtimeDir }), (err: unknown) => {
        assert.ok(err instanceof SnapshotTamperedError);
        assert.match(err.message, /stands on tpl \(its memory image\), which is not beside it/);
        return true;
      });
      await assert.rejects(access(runtimeDir), /ENOENT/, "no runtime dir made");
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
