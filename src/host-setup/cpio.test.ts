import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { lstat, mkdtemp, readFile, readlink, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { newcArchive } from "./cpio.js";
import { BUSYBOX_STATIC } from "./static-binaries.js";

describe("newc cpio writer", () => {
  const entries = [
    { type: "dir", path: "bin" },
    { type: "file", path: "bin/hello", data: Buffer.from("hi there\n"), mode: 0o755 },
    { type: "symlink", path: "bin/sh", target: "hello" },
    { type: "dir", path: "dev" },
    { type: "char", path: "dev/console", major: 5, minor: 1 },
    { type: "file", path: "/init", data: Buffer.from("#!/bin/sh\n"), mode: 0o700 },
  ] as const;
  const archive = newcArchive(entries);
  let dir: string | undefined;
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("is reproducible, 4-byte aligned and ends with the trailer", () => {
    assert.ok(archive.equals(newcArchive(entries)));
    assert.equal(archive.length % 4, 0);
    assert.equal(archive.subarray(0, 6).toString(), "070701");
    assert.ok(archive.includes(Buffer.from("TRAILER!!!\0")));
  });

  it("unpacks with busybox cpio into the same tree", {
    skip: (!existsSync(BUSYBOX_STATIC) || process.getuid?.() !== 0) && "needs root and busybox",
  }, async () => {
    dir = await mkdtemp(join(tmpdir(), "warren-cpio-"));
    execFileSync(BUSYBOX_STATIC, ["cpio", "-i", "-d"], { input: archive, cwd: dir });
    assert.equal(await readFile(join(dir, "bin/hello"), "utf8"), "hi there\n");
    assert.equal((await lstat(join(dir, "bin/hello"))).mode & 0o7777, 0o755);
    assert.equal(await readlink(join(dir, "bin/sh")), "hello");
    const console = await lstat(join(dir, "dev/console"));
    assert.ok(console.isCharacterDevice());
    assert.equal(console.rdev, (5 << 8) | 1);
    assert.equal((await lstat(join(dir, "init"))).mode & 0o7777, 0o700);
  });
});
