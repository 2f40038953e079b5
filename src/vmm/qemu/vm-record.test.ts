import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseVmRecord, VM_RECORD_VERSION, type VmRecord } from "./vm-record.js";

const run = "/var/lib/warren/run/abc";
const snapshots = "/var/lib/warren/snapshots";

/** A restored VM that took two fork captures and is switching to a third. */
const record: VmRecord = {
  version: VM_RECORD_VERSION,
  spec: {
    id: "abc",
    shape: { vcpus: 2, memoryMiB: 512, diskSizeMiB: 4096 },
    images: {
      kernel: "/images/vmlinuz",
      kernelVersion: "6.1.0",
      fingerprint: "f00",
      initramfs: "/images/initramfs.cpio.gz",
      agentDrive: "/images/agent.ext4",
    },
    baseDisk: "/images/base.ext4",
    network: { kind: "tap", netns: "warren-3", tap: "tap0" },
    runtimeDir: run,
    guestIp: "169.254.0.21/30",
    guestGateway: "169.254.0.22",
  },
  pid: 4242,
  startTime: 123456,
  qmpSocket: "/var/lib/warren/qmp/abc.sock",
  memory: { file: `${snapshots}/tpl/memory.img`, shared: false, snapshotDir: `${snapshots}/tpl` },
  rootDisk: `${run}/disk-2.qcow2`,
  rootNode: "root-2",
  backing: { file: `${snapshots}/f2/disk.qcow2`, format: "qcow2", snapshotDir: `${snapshots}/f2` },
  captures: 3,
  diskBytes: "4294967296",
  kernelCommandLine: "console=ttyS0",
  host: {
    accel: "tcg",
    cpuModel: "max",
    qemuVersion: "QEMU 10.0.2",
    kernel: "6.1.0",
    images: "f00",
  },
  identity: { uid: 100_007, gid: 100_007 },
  cgroup: true,
  pendingCapture: { dir: `${snapshots}/f3` },
};

/** The record with `change` applied at `path` (dot-separated), through JSON as stored. */
function changed(path: string, change: unknown): unknown {
  const copy = JSON.parse(JSON.stringify(record)) as Record<string, unknown>;
  const keys = path.split(".");
  const last = keys.pop() as string;
  let at = copy;
  for (const key of keys) at = at[key] as Record<string, unknown>;
  if (change === undefined) delete at[last];
  else at[last] = change;
  return copy;
}

describe("parseVmRecord", () => {
  it("reads back what a VM recorded, through JSON", () => {
    const json = (value: unknown) => JSON.parse(JSON.stringify(value)) as unknown;
    assert.deepEqual(json(parseVmRecord(json(record))), json(record));
    const booted = changed("memory", { file: `${run}/memory.img`, shared: true });
    const base = { file: "/images/base.ext4", format: "raw" };
    const fresh = {
      ...(booted as object),
      rootNode: "root",
      rootDisk: `${run}/disk.qcow2`,
      backing: base,
      captures: 0,
      pendingCapture: undefined,
      identity: undefined,
      cgroup: false,
    };
    const parsed = parseVmRecord(JSON.parse(JSON.stringify(fresh)));
    assert.deepEqual(parsed.memory, { file: `${run}/memory.img`, shared: true });
    assert.deepEqual(parsed.backing, base);
    assert.equal(parsed.identity, undefined);
    assert.equal(parsed.pendingCapture, undefined);
  });

  it("refuses a record of another version, naming both", () => {
    assert.throws(
      () => parseVmRecord(changed("version", 2)),
      /version 2; this server reads version 1/,
    );
    assert.throws(() => parseVmRecord(changed("version", undefined)), /version undefined/);
    assert.throws(() => parseVmRecord("{}"), /record is not an object/);
  });

  for (const [what, path, value, message] of [
    ["a missing pid", "pid", undefined, /pid undefined is not an integer/],
    ["pid 0", "pid", 0, /pid 0 is not an integer from 1/],
    ["a fractional start time", "startTime", 1.5, /startTime/],
    ["a relative QMP socket", "qmpSocket", "qmp/abc.sock", /qmpSocket .* not an absolute path/],
    ["a path climbing out", "spec.runtimeDir", "/var/lib/warren/run/../../etc", /absolute path/],
    ["a VM id that is a path", "spec.id", "../abc", /VM id/],
    ["an unknown network", "spec.network", { kind: "vde" }, /spec.network/],
    ["a root node no capture made", "rootNode", "root-4", /no node of its 3 captures/],
    ["a root node of another name", "rootNode", "layer0", /no node/],
    ["a root disk not the node's", "rootDisk", `${run}/disk-1.qcow2`, /is not .*disk-2\.qcow2/],
    ["a disk size that is no number", "diskBytes", "4e9", /diskBytes/],
    ["memory outside its snapshot", "memory.file", "/etc/shadow", /memory \/etc\/shadow is not in/],
    ["a backing outside its snapshot", "backing.file", "/tmp/x.qcow2", /backing \/tmp\/x/],
    ["an unknown disk format", "backing.format", "vmdk", /backing format vmdk/],
    ["an unknown accelerator", "host.accel", "hvf", /host.accel/],
    ["a uid that is no number", "identity.uid", "0", /identity.uid/],
    ["a cgroup that is no flag", "cgroup", "yes", /cgroup is not a boolean/],
    ["a pending capture with no number", "captures", 0, /root-2.*0 captures/],
  ] as const) {
    it(`refuses ${what}`, () => {
      assert.throws(
        () => parseVmRecord(changed(path, value)),
        (err: Error) => /^VM record refused: /.test(err.message) && message.test(err.message),
      );
    });
  }

  it("refuses a pending capture before any capture was numbered", () => {
    const fresh = {
      ...record,
      rootNode: "root",
      rootDisk: `${run}/disk.qcow2`,
      captures: 0,
    };
    assert.throws(() => parseVmRecord(fresh), /a pending capture needs a capture number/);
    assert.equal(parseVmRecord({ ...fresh, pendingCapture: undefined }).captures, 0);
  });
});
