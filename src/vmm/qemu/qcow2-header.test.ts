import assert from "node:assert/strict";
import { mkdtemp, open, rm, truncate, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  readHeaderCluster,
  withDataFile,
  withIncompatibleBit,
} from "../../../test/helpers/qcow2-craft.js";
import { SnapshotTamperedError } from "../errors.js";
import { MAX_VIRTUAL_SIZE, readQcow2Header } from "./qcow2-header.js";
import { createOverlay } from "./qcow2-overlay.js";

describe("readQcow2Header (a header a VMM had in its hands)", () => {
  let dir: string;
  let overlay: Buffer;
  let n = 0;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "warren-qcow2-header-"));
    const base = join(dir, "base.raw");
    await writeFile(base, "");
    await truncate(base, 64 << 20);
    const path = join(dir, "overlay.qcow2");
    await createOverlay(path, base, "raw", { backingName: "../tpl/disk.qcow2" });
    overlay = await readHeaderCluster(path);
  });
  after(() => rm(dir, { recursive: true, force: true }));

  /** Writes `cluster` as an image's first cluster and reads its header back. */
  async function header(cluster: Buffer) {
    const path = join(dir, `image-${++n}.qcow2`);
    await writeFile(path, cluster);
    const handle = await open(path, "r");
    try {
      return await readQcow2Header(handle, path);
    } finally {
      await handle.close();
    }
  }

  const patched = (patch: (b: Buffer) => void) => {
    const b = Buffer.from(overlay);
    patch(b);
    return b;
  };

  it("reads Warren's own overlay: its size and backing name", async () => {
    assert.deepEqual(await header(overlay), {
      virtualSize: 64n << 20n,
      backingName: "../tpl/disk.qcow2",
    });
  });

  it("accepts the feature name table and the bits QEMU sets on Warren's disks", async () => {
    const name = "../tpl/disk.qcow2";
    const withTable = patched((b) => {
      b.fill(0, 104, 1024);
      let at = 104;
      b.writeUInt32BE(0xe2792aca, at); // backing format
      b.writeUInt32BE(5, at + 4);
      b.write("qcow2", at + 8);
      at += 16;
      b.writeUInt32BE(0x6803f857, at); // feature name table: one entry
      b.writeUInt32BE(48, at + 4);
      b.write("dirty bit", at + 10);
      at += 56;
      at += 8; // end of extensions
      b.write(name, at);
      b.writeBigUInt64BE(BigInt(at), 8);
      b.writeUInt32BE(name.length, 16);
      b.writeBigUInt64BE(1n | (1n << 3n), 72); // dirty, compression type
    });
    assert.equal((await header(withTable)).backingName, "../tpl/disk.qcow2");
  });

  const refusals: [string, () => Buffer, RegExp][] = [
    [
      "an external data file",
      () => withDataFile(overlay, "/etc/shadow"),
      /sets the external data file incompatible feature/,
    ],
    [
      "a data file extension without its feature bit",
      () => patched((b) => b.set(withDataFile(overlay, "/etc/shadow"))).fill(0, 72, 80),
      /carries an external data file/,
    ],
    [
      "an unknown incompatible feature",
      () => withIncompatibleBit(overlay, 40),
      /sets unknown incompatible feature bit 40/,
    ],
    ["the corrupt bit", () => withIncompatibleBit(overlay, 1), /sets the corrupt incompatible/],
    ["encryption", () => patched((b) => b.writeUInt32BE(2, 32)), /encrypts the image/],
    ["internal snapshots", () => patched((b) => b.writeUInt32BE(1, 60)), /holds 1 internal/],
    [
      "an unknown extension",
      () =>
        patched((b) => {
          b.writeUInt32BE(0x12345678, 120);
          b.writeUInt32BE(0, 124);
        }),
      /carries an unknown extension 0x12345678/,
    ],
    [
      "persistent bitmaps",
      () =>
        patched((b) => {
          b.writeUInt32BE(0x23852875, 120);
          b.writeUInt32BE(0, 124);
        }),
      /carries persistent bitmaps/,
    ],
    [
      "an extension longer than the room before the backing name",
      () => patched((b) => b.writeUInt32BE(4096, 108)),
      /has an extension too large/,
    ],
    ["version 2", () => patched((b) => b.writeUInt32BE(2, 4)), /is of version 2, not 3/],
    ["not qcow2", () => patched((b) => b.write("RAW!", 0)), /is not a qcow2 header/],
    [
      "a huge virtual size",
      () => patched((b) => b.writeBigUInt64BE(MAX_VIRTUAL_SIZE + 1n, 24)),
      /gives a virtual size of/,
    ],
    [
      "a backing name beyond the first cluster",
      () => patched((b) => b.writeBigUInt64BE(1n << 20n, 8)),
      /beyond its first cluster/,
    ],
    ["a truncated image", () => overlay.subarray(0, 100), /is cut short/],
  ];
  for (const [what, cluster, message] of refusals) {
    it(`refuses ${what}`, async () => {
      await assert.rejects(header(cluster()), (err: unknown) => {
        assert.ok(err instanceof SnapshotTamperedError, String(err));
        assert.match(err.message, message);
        return true;
      });
    });
  }
});
