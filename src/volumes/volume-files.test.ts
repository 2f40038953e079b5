// The volume content layer on a real directory: what the SDK's Volume does (write, read,
// stat, list, makeDir, remove, metadata) and what a hostile guest sharing the tree tries
// (links out of the volume, in a path or as the last name, swapped in mid-request; FIFOs;
// `..`): nothing outside the volume is ever read, written, chowned or removed.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { text } from "node:stream/consumers";
import { after, beforeEach, describe, it } from "node:test";
import { WarrenError } from "../shared/index.js";
import { VolumeFiles } from "./volume-files.js";

const isRoot = process.getuid?.() === 0;

describe("volume files", () => {
  const base = mkdtempSync(join(tmpdir(), "warren-volume-files-"));
  const root = join(base, "volume");
  const outside = join(base, "outside");
  const files = new VolumeFiles(root);

  beforeEach(() => {
    rmSync(root, { recursive: true, force: true });
    rmSync(outside, { recursive: true, force: true });
    mkdirSync(root);
    mkdirSync(outside);
    writeFileSync(join(outside, "secret"), "host secret\n");
  });

  after(() => rmSync(base, { recursive: true, force: true }));

  const body = (value: string) => Readable.from([Buffer.from(value)]);
  const reason = (err: unknown) => (err instanceof WarrenError ? err.reason : String(err));
  const read = async (path: string) => text((await files.read(path)).body);

  it("writes, reads, stats and overwrites files", async () => {
    const written = await files.write("/hello.txt", body("hello"), {});
    assert.equal(written.path, "/hello.txt");
    assert.equal(written.name, "hello.txt");
    assert.equal(written.type, "file");
    assert.equal(written.size, 5);
    assert.equal(written.mode, 0o644);
    assert.equal(await read("hello.txt"), "hello");
    await files.write("/hello.txt", body("hi"), { force: true });
    assert.equal(await read("/hello.txt"), "hi", "a shorter write truncates");
    await files.write("/empty", body(""), {});
    assert.equal(await read("/empty"), "");
    assert.equal((await files.stat("/")).type, "directory");
    assert.equal((await files.stat("/")).path, "/");
  });

  it("makes directories: one level, or missing parents with force; lists by depth", async () => {
    await assert.rejects(files.makeDir("/a/b/c", {}), (err) => reason(err) === "not_found");
    const made = await files.makeDir("/a/b/c", { force: true, mode: 0o750 });
    assert.equal(made.type, "directory");
    assert.equal(made.mode, 0o750);
    await assert.rejects(files.makeDir("/a", {}), (err) => reason(err) === "conflict");
    await files.makeDir("/a", { force: true });
    await files.write("/a/b/file", body("x"), {});
    await assert.rejects(
      files.write("/new/deeper/file", body("x"), {}),
      (err) => reason(err) === "not_found",
    );
    await files.write("/new/deeper/file", body("x"), { force: true });
    assert.deepEqual(
      (await files.list("/a")).map((e) => e.path),
      ["/a/b"],
    );
    assert.deepEqual(
      (await files.list("/a", 3)).map((e) => e.path),
      ["/a/b", "/a/b/c", "/a/b/file"],
    );
    await assert.rejects(files.list("/missing"), (err) => reason(err) === "not_found");
    await assert.rejects(files.list("/a/b/file"), (err) => reason(err) === "invalid_argument");
  });

  it("removes files and whole trees", async () => {
    await files.write("/t/x/y/f", body("1"), { force: true });
    await files.remove("/t");
    assert.equal(existsSync(join(root, "t")), false);
    await assert.rejects(files.remove("/t"), (err) => reason(err) === "not_found");
    await assert.rejects(files.remove("/"), (err) => reason(err) === "invalid_argument");
  });

  it("sets owner and mode", { skip: !isRoot && "chown needs root" }, async () => {
    await files.write("/owned", body("x"), { uid: 1000, gid: 1001, mode: 0o600 });
    let info = await files.stat("/owned");
    assert.deepEqual([info.uid, info.gid, info.mode], [1000, 1001, 0o600]);
    info = await files.setMetadata("/owned", { uid: 1002, mode: 0o755 });
    assert.deepEqual([info.uid, info.gid, info.mode], [1002, 1001, 0o755]);
    await assert.rejects(
      files.setMetadata("/owned", { mode: 0o10000 }),
      (err) => reason(err) === "invalid_argument",
    );
  });

  it("never stores set-uid or set-gid bits: a file planted here must not run as its owner in a guest", async () => {
    const written = await files.write("/tool", body("#!/bin/sh\n"), { mode: 0o4755 });
    assert.equal(written.mode, 0o755);
    assert.equal(statSync(join(root, "tool")).mode & 0o7777, 0o755);
    assert.equal((await files.setMetadata("/tool", { mode: 0o6777 })).mode, 0o777);
    assert.equal((await files.makeDir("/group", { mode: 0o3775 })).mode, 0o1775, "sticky kept");
    assert.equal(statSync(join(root, "group")).mode & 0o7777, 0o1775);
    // A set-gid directory from before: what is made in it does not inherit the bit.
    mkdirSync(join(root, "sgid"));
    execFileSync("chmod", ["2777", join(root, "sgid")]);
    assert.equal((await files.makeDir("/sgid/inner", {})).mode & 0o6000, 0);
    // A set-uid file from before loses the bit when it is written again.
    execFileSync("chmod", ["4755", join(root, "tool")]);
    assert.equal((await files.write("/tool", body("x"), {})).mode, 0o755);
  });

  it("refuses paths that climb out", async () => {
    for (const path of ["../outside/secret", "/a/../../outside/secret", "a\0b"]) {
      await assert.rejects(read(path), (err) => reason(err) === "invalid_argument", path);
    }
  });

  it("never follows a link out of the volume, in the path or as the last name", async () => {
    symlinkSync(outside, join(root, "out"));
    symlinkSync(join(outside, "secret"), join(root, "leak"));
    const refused = (err: unknown) => reason(err) === "invalid_argument";
    await assert.rejects(read("/out/secret"), refused);
    await assert.rejects(read("/leak"), refused);
    await assert.rejects(files.write("/out/planted", body("x"), {}), refused);
    await assert.rejects(files.write("/leak", body("overwritten"), {}), refused);
    await assert.rejects(files.makeDir("/out/dir", {}), refused);
    await assert.rejects(files.makeDir("/out/a/b", { force: true }), refused);
    await assert.rejects(files.list("/out"), refused);
    await assert.rejects(files.setMetadata("/leak", { mode: 0o777 }), refused);
    await assert.rejects(files.setMetadata("/out/secret", { mode: 0o777 }), refused);
    const link = await files.stat("/leak");
    assert.equal(link.type, "symlink");
    assert.equal(link.target, join(outside, "secret"));
    // Removing the link removes the link; a tree holding one leaves its target alone.
    mkdirSync(join(root, "tree"));
    symlinkSync(outside, join(root, "tree", "out"));
    await files.remove("/tree");
    await files.remove("/leak");
    assert.equal(readFileSync(join(outside, "secret"), "utf8"), "host secret\n");
    assert.equal(existsSync(join(outside, "planted")), false);
    assert.equal(statSync(join(outside, "secret")).mode & 0o777, 0o644);
  });

  it("refuses a FIFO or a device at once instead of hanging on it", async () => {
    execFileSync("mkfifo", [join(root, "fifo")]);
    const refused = (err: unknown) => reason(err) === "invalid_argument";
    await assert.rejects(read("/fifo"), refused);
    await assert.rejects(files.write("/fifo", body("x"), {}), refused);
    await assert.rejects(files.setMetadata("/fifo", { mode: 0o600 }), refused);
    assert.equal((await files.stat("/fifo")).type, "unknown");
    await files.remove("/fifo");
  });

  it("keeps writes inside while a guest swaps a directory for a link out, again and again", async () => {
    mkdirSync(join(root, "d"));
    let swapping = true;
    // The guest's side: `d` flips between a directory and a link to the host's directory.
    const guest = (async () => {
      while (swapping) {
        renameSync(join(root, "d"), join(root, "d.dir"));
        symlinkSync(outside, join(root, "d"));
        await new Promise((resolve) => setImmediate(resolve));
        rmSync(join(root, "d"));
        renameSync(join(root, "d.dir"), join(root, "d"));
        await new Promise((resolve) => setImmediate(resolve));
      }
    })();
    let landed = 0;
    for (let i = 0; i < 300; i++) {
      await files
        .write(`/d/planted-${i}`, body("x"), {})
        .then(() => landed++)
        .catch(() => {});
      await files.remove(`/d/secret`).catch(() => {});
    }
    swapping = false;
    await guest;
    assert.deepEqual(
      execFileSync("ls", [outside]).toString().trim().split("\n"),
      ["secret"],
      "nothing written or removed outside",
    );
    assert.ok(landed > 0, "some writes landed in the volume's own directory");
  });
});
