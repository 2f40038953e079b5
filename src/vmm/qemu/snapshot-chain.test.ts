import assert from "node:assert/strict";
import { mkdir, mkdtemp, rename, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { SnapshotMismatchError, SnapshotTamperedError, VmmError } from "../errors.js";
import {
  backingRecord,
  diskOf,
  fileRef,
  headerName,
  readChain,
  resolveBacking,
  resolveFile,
} from "./snapshot-chain.js";
import {
  type DiskBacking,
  SNAPSHOT_FORMAT_VERSION,
  type SnapshotFileRef,
  type SnapshotMeta,
  writeSnapshotMeta,
} from "./snapshot-meta.js";

const BASE = "/images/base.ext4";
/** The guest images directory the chains in these tests end in. */
const POLICY = { imagesDir: "/images" };

function meta(memoryImage: SnapshotFileRef, diskBacking: DiskBacking): SnapshotMeta {
  return {
    formatVersion: SNAPSHOT_FORMAT_VERSION,
    accel: "tcg",
    cpuModel: "max",
    qemuVersion: "q",
    kernel: "6.1",
    images: "f",
    shape: { vcpus: 1, memoryMiB: 256 },
    memoryImage,
    diffPages: 0,
    deviceStateFile: "devstate.bin",
    diskFile: "disk.qcow2",
    diskBacking,
    createdAt: new Date(0).toISOString(),
  };
}

/** Writes a snapshot directory holding only its meta.json (resolution never opens files). */
async function snapshot(root: string, name: string, m: SnapshotMeta): Promise<string> {
  const dir = join(root, name);
  await mkdir(dir, { recursive: true });
  await writeSnapshotMeta(dir, m);
  return dir;
}

const TEMPLATE = meta({ file: "memory.img" }, { image: BASE, format: "raw" });
const onTemplate = (backing: DiskBacking = diskOf("tpl")) =>
  meta({ snapshot: "tpl", file: "memory.img" }, backing);

/** A template, a fork capture on it and a pause on the fork, side by side in `root`. */
async function family(root: string): Promise<void> {
  await snapshot(root, "tpl", TEMPLATE);
  await snapshot(root, "fork", onTemplate());
  await snapshot(root, "pause", onTemplate(diskOf("fork")));
}

describe("snapshot references (format 4)", () => {
  let work: string;
  before(async () => {
    work = await mkdtemp(join(tmpdir(), "warren-chain-"));
  });
  after(() => rm(work, { recursive: true, force: true }));
  let n = 0;
  const fresh = async () => {
    const root = join(work, `r${++n}`, "snapshots");
    await mkdir(root, { recursive: true });
    return root;
  };

  it("resolves siblings against the directory the snapshot is found in, wherever it moved", async () => {
    const a = await fresh();
    await family(a);
    const there = await readChain(join(a, "pause"), POLICY);
    assert.deepEqual(
      there.disk.map((layer) => layer.file),
      [
        join(a, "pause", "disk.qcow2"),
        join(a, "fork", "disk.qcow2"),
        join(a, "tpl", "disk.qcow2"),
        BASE,
      ],
    );
    assert.deepEqual(there.memoryImage, {
      dir: join(a, "tpl"),
      path: join(a, "tpl", "memory.img"),
    });
    assert.deepEqual(
      [...there.dirs].sort(),
      ["fork", "pause", "tpl"].map((d) => join(a, d)),
    );

    // Another node's data dir: the same records, read elsewhere, never name the first one.
    const b = join(work, "elsewhere", "snapshots");
    await mkdir(join(work, "elsewhere"));
    await rename(a, b);
    const moved = await readChain(join(b, "pause"), POLICY);
    assert.deepEqual(
      moved.disk.map((layer) => layer.file),
      there.disk.map((layer) => layer.file.replace(a, b)),
    );
    assert.equal(moved.memoryImage.path, join(b, "tpl", "memory.img"));
    assert.ok(!JSON.stringify(moved).includes(a), "nothing of the old location is left");
  });

  it("refuses a snapshot whose ancestor is not beside it, saying which, at once", async () => {
    const root = await fresh();
    await family(root);
    await rm(join(root, "tpl"), { recursive: true });
    await assert.rejects(readChain(join(root, "pause"), POLICY), (err: unknown) => {
      assert.ok(err instanceof SnapshotTamperedError);
      assert.match(err.message, /stands on tpl \(its memory image\), which is not beside it/);
      assert.match(err.message, new RegExp(`${join(root, "tpl")} is missing`));
      return true;
    });
  });

  it("refuses references that climb out of the snapshots' directory", async () => {
    const root = await fresh();
    await snapshot(root, "tpl", TEMPLATE);
    await snapshot(join(root, ".."), "outside", TEMPLATE);
    const cases: [string, SnapshotMeta, RegExp][] = [
      ["dotdot", meta({ snapshot: "..", file: "memory.img" }, diskOf("tpl")), /"\.\." is a path/],
      [
        "up-and-over",
        meta({ snapshot: "../outside", file: "memory.img" }, diskOf("tpl")),
        /"\.\.\/outside" is a path/,
      ],
      [
        "file-path",
        meta({ snapshot: "tpl", file: "../../outside/memory.img" }, diskOf("tpl")),
        /memory image's file "\.\.\/\.\.\/outside\/memory\.img" is a path/,
      ],
      [
        "disk-dotdot",
        meta(
          { file: "memory.img" },
          { snapshot: "../outside", file: "disk.qcow2", format: "qcow2" },
        ),
        /disk backing's snapshot "\.\.\/outside" is a path/,
      ],
      [
        "dot-name",
        meta({ snapshot: ".tpl-evicting", file: "memory.img" }, diskOf("tpl")),
        /"\.tpl-evicting" is a path/,
      ],
    ];
    for (const [name, m, message] of cases) {
      await snapshot(root, name, m);
      await assert.rejects(readChain(join(root, name), POLICY), (err: unknown) => {
        assert.ok(err instanceof SnapshotTamperedError, `${name}: ${String(err)}`);
        assert.match(err.message, message, name);
        return true;
      });
    }
  });

  it("refuses an absolute path where a sibling is expected", async () => {
    const root = await fresh();
    await snapshot(root, "tpl", TEMPLATE);
    const tplDisk = join(root, "tpl", "disk.qcow2");
    const cases: [string, SnapshotMeta, RegExp][] = [
      [
        "abs-snapshot",
        meta({ snapshot: join(root, "tpl"), file: "memory.img" }, diskOf("tpl")),
        /snapshot ".*\/tpl" is an absolute path/,
      ],
      [
        "abs-file",
        meta({ file: join(root, "tpl", "memory.img") }, diskOf("tpl")),
        /file ".*\/tpl\/memory\.img" is an absolute path/,
      ],
      [
        "abs-disk",
        meta({ file: "memory.img" }, { snapshot: "tpl", file: tplDisk, format: "qcow2" }),
        /is an absolute path/,
      ],
      // An image inside the snapshots' directory is a snapshot's disk under another name.
      [
        "image-inside",
        meta({ file: "memory.img" }, { image: tplDisk, format: "qcow2" }),
        /names .*\/tpl\/disk\.qcow2 by absolute path, inside the snapshots' directory/,
      ],
      [
        "image-relative",
        meta({ file: "memory.img" }, { image: "base.ext4", format: "raw" }),
        /is neither a snapshot's nor an image's/,
      ],
    ];
    for (const [name, m, message] of cases) {
      await snapshot(root, name, m);
      await assert.rejects(readChain(join(root, name), POLICY), (err: unknown) => {
        assert.ok(err instanceof SnapshotTamperedError, `${name}: ${String(err)}`);
        assert.match(err.message, message, name);
        return true;
      });
    }
  });

  it("refuses an image record outside the guest images directory, by name or through a link", async () => {
    const root = await fresh();
    const images = join(root, "..", "images");
    await mkdir(images);
    await symlink("/etc/passwd", join(images, "linked.ext4"));
    const cases: [string, string][] = [
      ["host-file", "/etc/passwd"],
      ["dot-dot", `${images}/../../etc/passwd`],
      ["prefix", `${images}-other/base.ext4`],
      ["linked", join(images, "linked.ext4")],
    ];
    for (const [name, image] of cases) {
      await snapshot(root, name, meta({ file: "memory.img" }, { image, format: "raw" }));
      await assert.rejects(readChain(join(root, name), { imagesDir: images }), (err: unknown) => {
        assert.ok(err instanceof SnapshotTamperedError, `${name}: ${String(err)}`);
        assert.match(err.message, /outside the guest images directory/, name);
        return true;
      });
    }
    await snapshot(
      root,
      "inside",
      meta({ file: "memory.img" }, { image: join(images, "base.ext4"), format: "raw" }),
    );
    const chain = await readChain(join(root, "inside"), { imagesDir: images });
    assert.equal(chain.disk[1]?.file, join(images, "base.ext4"));
  });

  it("refuses a sibling that is a symbolic link, and a snapshot found through one", async () => {
    const root = await fresh();
    const elsewhere = await fresh();
    await snapshot(elsewhere, "tpl", TEMPLATE);
    await symlink(join(elsewhere, "tpl"), join(root, "tpl"));
    await snapshot(root, "pause", onTemplate());
    await assert.rejects(readChain(join(root, "pause"), POLICY), (err: unknown) => {
      assert.ok(err instanceof SnapshotTamperedError);
      assert.match(err.message, /tpl is a symbolic link/);
      return true;
    });
    // A snapshot that is not there at all is a failed restore, not a tampered one.
    await assert.rejects(
      readChain(join(root, "nothing"), POLICY),
      (err: unknown) => err instanceof VmmError && /nothing is missing/.test(err.message),
    );
    await symlink(join(root, "pause"), join(root, "via-link"));
    await assert.rejects(readChain(join(root, "via-link"), POLICY), /via-link is a symbolic link/);
  });

  it("refuses a disk chain that loops, and one deeper than it may be", async () => {
    const root = await fresh();
    await snapshot(root, "a", meta({ file: "memory.img" }, diskOf("b")));
    await snapshot(root, "b", meta({ snapshot: "a", file: "memory.img" }, diskOf("a")));
    await assert.rejects(readChain(join(root, "a"), POLICY), /its disk chain loops at .*\/a$/);
    await snapshot(root, "self", meta({ file: "memory.img" }, diskOf("self")));
    await assert.rejects(readChain(join(root, "self"), POLICY), /loops at .*\/self$/);

    const deep = await fresh();
    await snapshot(deep, "l0", TEMPLATE);
    for (let i = 1; i <= 1000; i++)
      await snapshot(
        deep,
        `l${i}`,
        meta({ snapshot: "l0", file: "memory.img" }, diskOf(`l${i - 1}`)),
      );
    await assert.rejects(readChain(join(deep, "l1000"), POLICY), (err: unknown) => {
      assert.ok(err instanceof VmmError);
      assert.match(err.message, /disk chain deeper than 1000/);
      return true;
    });
    assert.equal((await readChain(join(deep, "l998"), POLICY)).disk.length, 1000);
  });

  it("refuses a capture of an older format (3 recorded absolute paths)", async () => {
    const root = await fresh();
    const dir = join(root, "old");
    await mkdir(dir);
    const old = { ...TEMPLATE, formatVersion: 3, memoryImage: join(dir, "memory.img") };
    await writeFile(join(dir, "meta.json"), JSON.stringify(old));
    await assert.rejects(readChain(dir, POLICY), (err: unknown) => {
      assert.ok(err instanceof SnapshotMismatchError);
      assert.match(err.message, /format version 3; this Warren reads version 4/);
      return true;
    });
  });

  it("records what a capture stands on by sibling name, and refuses a capture elsewhere", async () => {
    const root = await fresh();
    const tpl = join(root, "tpl");
    const into = join(root, "pause");
    assert.deepEqual(fileRef(into, into, join(into, "memory.img")), { file: "memory.img" });
    assert.deepEqual(fileRef(into, tpl, join(tpl, "memory.img")), {
      snapshot: "tpl",
      file: "memory.img",
    });
    assert.deepEqual(
      backingRecord(into, { file: join(tpl, "disk.qcow2"), format: "qcow2", snapshotDir: tpl }),
      { snapshot: "tpl", file: "disk.qcow2", format: "qcow2" },
    );
    assert.deepEqual(backingRecord(into, { file: BASE, format: "raw" }), {
      image: BASE,
      format: "raw",
    });
    assert.throws(
      () => fileRef(join(work, "cache", "pause"), tpl, join(tpl, "memory.img")),
      /cannot capture into .*\/cache\/pause: it would stand on .*\/tpl, which is not beside it/,
    );
    assert.throws(
      () => fileRef(join(root, "my pause"), tpl, join(tpl, "memory.img")),
      /"my pause" is not a name a snapshot can record/,
    );
    assert.equal(headerName(diskOf(tpl)), "../tpl/disk.qcow2");
    assert.equal(headerName({ image: BASE, format: "raw" }), BASE);
  });

  it("resolves a snapshot's own files and a base image as recorded", async () => {
    const root = await fresh();
    const dir = await snapshot(root, "tpl", TEMPLATE);
    assert.deepEqual(await resolveFile(dir, { file: "memory.diff" }, "memory diff"), {
      dir,
      path: join(dir, "memory.diff"),
    });
    await assert.rejects(resolveFile(dir, { file: "a/b" }, "memory diff"), /"a\/b" is a path/);
    assert.equal((await resolveBacking(dir, { image: BASE, format: "raw" }, POLICY)).file, BASE);
  });
});
