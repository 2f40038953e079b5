import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { SnapshotMismatchError } from "../errors.js";
import { checkRestorable, SNAPSHOT_FORMAT_VERSION, type SnapshotMeta } from "./snapshot-meta.js";

const meta: SnapshotMeta = {
  formatVersion: SNAPSHOT_FORMAT_VERSION,
  accel: "tcg",
  cpuModel: "max",
  qemuVersion: "QEMU emulator version 7.2.22",
  kernel: "6.1.0-57-cloud-amd64",
  images: "0123456789abcdef",
  shape: { vcpus: 1, memoryMiB: 512 },
  memoryImage: { file: "memory.img" },
  diffPages: 0,
  deviceStateFile: "devstate.bin",
  diskFile: "disk.qcow2",
  diskBacking: { image: "/base.ext4", format: "raw" },
  createdAt: "2026-11-30T00:00:00Z",
};
const host = {
  accel: "tcg" as const,
  cpuModel: "max",
  qemuVersion: meta.qemuVersion,
  kernel: meta.kernel,
  images: meta.images,
};

describe("checkRestorable", () => {
  it("accepts the machine the snapshot was taken on", () => {
    checkRestorable(meta, host, meta.shape);
  });
  it("names every difference", () => {
    assert.throws(
      () =>
        checkRestorable(
          meta,
          { ...host, accel: "kvm", cpuModel: "host" },
          { vcpus: 2, memoryMiB: 512 },
        ),
      (err: unknown) =>
        err instanceof SnapshotMismatchError &&
        /accelerator was tcg, here kvm/.test(err.message) &&
        /CPU model was max, here host/.test(err.message) &&
        /vCPUs was 1, here 2/.test(err.message),
    );
  });
  it("refuses a snapshot whose guest images were rebuilt since", () => {
    assert.throws(
      () => checkRestorable(meta, { ...host, images: "fedcba9876543210" }, meta.shape),
      /guest images was 0123456789abcdef, here fedcba9876543210/,
    );
  });
});
