import assert from "node:assert/strict";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it } from "node:test";
import { WarrenError } from "../shared/index.js";
import { DiskSpace, statDisk } from "./disk-space.js";

const MiB = 1024 * 1024;

/** A filesystem stand-in: 10 GiB, `free` bytes available. */
function diskWith(free: number, reserveMiB = 1024) {
  return new DiskSpace("/data", reserveMiB, () => ({ totalBytes: 10_240 * MiB, freeBytes: free }));
}

it("admits a write that leaves the reserve free, refuses one that would not (507)", () => {
  const disk = diskWith(2048 * MiB);
  disk.admit("a create");
  disk.admit("an upload", 1024 * MiB);
  const err = (() => {
    try {
      disk.admit("an upload", 1024 * MiB + 1);
    } catch (e) {
      return e;
    }
  })();
  assert.ok(err instanceof WarrenError);
  assert.equal(err.reason, "disk_pressure");
  assert.equal(err.status, 507);
  assert.match(
    err.message,
    /^an upload: the data dir's disk has 2048 MiB free, it needs 1025 MiB and 1024 MiB are kept in reserve \(WARREN_DISK_RESERVE_MIB\)/,
  );
  assert.throws(() => diskWith(1023 * MiB).admit("a create"), /disk has 1023 MiB free and/);
});

it("a reserve of 0 admits everything; the ceiling is the filesystem less the reserve", () => {
  diskWith(0, 0).admit("a create", 10 * MiB);
  assert.equal(diskWith(0).ceilingMiB(), 10_240 - 1024);
  assert.equal(diskWith(0, 0).ceilingMiB(), 10_240);
});

it("reads statfs of the nearest existing directory", () => {
  const stats = statDisk(join(tmpdir(), "warren-not-made-yet", "builds"));
  assert.ok(stats.totalBytes > 0 && stats.freeBytes <= stats.totalBytes);
});
