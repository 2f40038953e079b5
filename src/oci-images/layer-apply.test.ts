import assert from "node:assert/strict";
import { lstat, mkdir, mkdtemp, readFile, readlink, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { after, before, it } from "node:test";
import { gzipSync } from "node:zlib";
import { makeTar, type TarEntry, ZSTD_TAR_FIXTURE } from "../../test/helpers/tar-archive.js";
import { applyLayer } from "./layer-apply.js";

let scratch: string;
before(async () => {
  scratch = await mkdtemp(join(tmpdir(), "warren-layer-"));
});
after(async () => {
  await rm(scratch, { recursive: true, force: true });
});

let count = 0;
/** A fresh root dir inside a parent, with a sibling file a hostile layer must not touch. */
async function freshRoot(): Promise<{ root: string; outside: string }> {
  const parent = join(scratch, String(count++));
  const root = join(parent, "root");
  await mkdir(root, { recursive: true });
  const outside = join(parent, "outside");
  await mkdir(outside);
  await writeFile(join(outside, "secret"), "untouched");
  return { root, outside };
}

const apply = (root: string, data: Buffer) =>
  applyLayer(Readable.from([data]), { root, maxBytes: 1 << 30 });

it("applies layers in order: files, dirs, modes, symlinks, hard links", async () => {
  const { root } = await freshRoot();
  const stats = await apply(
    root,
    makeTar([
      { path: "etc/", type: "Directory" },
      { path: "etc/os-release", content: "ID=debian\n" },
      { path: "usr/bin/tool", content: "#!/bin/sh\n", mode: 0o4755 },
      { path: "bin", type: "SymbolicLink", linkpath: "usr/bin" },
      { path: "usr/bin/tool-link", type: "Link", linkpath: "usr/bin/tool" },
      { path: "dev/null", type: "CharacterDevice" },
    ]),
  );
  assert.equal(stats.skippedNodes, 1);
  assert.equal(await readFile(join(root, "etc/os-release"), "utf8"), "ID=debian\n");
  assert.equal((await stat(join(root, "usr/bin/tool"))).mode & 0o7777, 0o4755);
  assert.equal(await readlink(join(root, "bin")), "usr/bin");
  const [a, b] = [
    await stat(join(root, "usr/bin/tool")),
    await stat(join(root, "usr/bin/tool-link")),
  ];
  assert.equal(a.ino, b.ino, "hard link shares the inode");
  assert.equal(a.nlink, 2);
  // A later layer writes through the bin → usr/bin link (resolved inside the root).
  await apply(root, makeTar([{ path: "bin/other", content: "x" }]));
  assert.equal(await readFile(join(root, "usr/bin/other"), "utf8"), "x");
  // ...and hard-links to a file of a lower layer.
  await apply(
    root,
    makeTar([{ path: "etc/os-release.bak", type: "Link", linkpath: "etc/os-release" }]),
  );
  assert.equal(
    (await stat(join(root, "etc/os-release.bak"))).ino,
    (await stat(join(root, "etc/os-release"))).ino,
  );
});

it("applies whiteouts and opaque directories to lower layers only", async () => {
  const { root } = await freshRoot();
  await apply(
    root,
    makeTar([
      { path: "a/keep", content: "1" },
      { path: "a/gone", content: "2" },
      { path: "a/dir/x", content: "3" },
      { path: "opq/old1", content: "4" },
      { path: "opq/sub/old2", content: "5" },
    ]),
  );
  const stats = await apply(
    root,
    makeTar([
      { path: "a/.wh.gone" },
      { path: "a/.wh.dir" },
      { path: "opq/", type: "Directory" },
      { path: "opq/new", content: "6" },
      { path: "opq/.wh..wh..opq" },
      { path: "opq/newer", content: "7" },
    ]),
  );
  assert.equal(stats.whiteouts, 3);
  assert.equal(await readFile(join(root, "a/keep"), "utf8"), "1");
  await assert.rejects(lstat(join(root, "a/gone")));
  await assert.rejects(lstat(join(root, "a/dir")));
  await assert.rejects(lstat(join(root, "a/.wh.gone")), "whiteout files are not left in the tree");
  await assert.rejects(lstat(join(root, "opq/old1")));
  await assert.rejects(lstat(join(root, "opq/sub")));
  await assert.rejects(lstat(join(root, "opq/.wh..wh..opq")));
  assert.equal(await readFile(join(root, "opq/new"), "utf8"), "6", "same layer's entries stay");
  assert.equal(await readFile(join(root, "opq/newer"), "utf8"), "7");
});

it("replaces a lower layer's directory with a file and a file with a directory", async () => {
  const { root } = await freshRoot();
  await apply(
    root,
    makeTar([
      { path: "x/inner", content: "1" },
      { path: "y", content: "2" },
    ]),
  );
  await apply(
    root,
    makeTar([
      { path: "x", content: "file now" },
      { path: "y/", type: "Directory" },
    ]),
  );
  assert.equal(await readFile(join(root, "x"), "utf8"), "file now");
  assert.ok((await lstat(join(root, "y"))).isDirectory());
});

it("never writes outside the root, whatever the layer says", async () => {
  const { root, outside } = await freshRoot();
  const hostile: TarEntry[] = [
    { path: "../outside/secret", content: "dotdot" },
    { path: "/abs/../../outside/secret", content: "absolute" },
    { path: "escape", type: "SymbolicLink", linkpath: "../outside" },
    { path: "escape/secret", content: "through a relative link" },
    { path: "abs", type: "SymbolicLink", linkpath: `${outside}` },
    { path: "abs/secret", content: "through an absolute link" },
    { path: "up", type: "SymbolicLink", linkpath: "../../../../.." },
    { path: "up/outside/secret", content: "through ../.." },
    { path: "hl", type: "Link", linkpath: "../outside/secret" },
  ];
  await apply(root, makeTar(hostile.slice(0, 8))).catch(() => {});
  await apply(root, makeTar([hostile[8] as TarEntry])).catch(() => {});
  // The writes that tried to escape landed inside the root, as they would in a chroot.
  assert.equal(await readFile(join(root, "outside/secret"), "utf8"), "through ../..");
  // A symlink from an earlier layer, then a write to the link's own path: the link is replaced.
  await apply(
    root,
    makeTar([{ path: "last", type: "SymbolicLink", linkpath: `${outside}/secret` }]),
  );
  await apply(root, makeTar([{ path: "last", content: "replaces the link" }]));
  await apply(root, makeTar([{ path: "abs/.wh.secret" }, { path: "escape/.wh..wh..opq" }]));
  assert.equal(await readFile(join(outside, "secret"), "utf8"), "untouched");
  assert.equal(await readFile(join(root, "last"), "utf8"), "replaces the link");
});

it("unpacks gzip and zstd layers (sniffed from their bytes)", async () => {
  const { root } = await freshRoot();
  const tar = makeTar([
    { path: "big", content: "z".repeat(300_000) },
    { path: "small", content: "s" },
  ]);
  await applyLayer(Readable.from([gzipSync(tar)]), { root, maxBytes: 1 << 30 });
  assert.equal((await stat(join(root, "big"))).size, 300_000);
  const zstd = ZSTD_TAR_FIXTURE;
  // Chunked, as a download arrives.
  const chunks = Array.from({ length: Math.ceil(zstd.length / 7) }, (_, i) =>
    zstd.subarray(i * 7, i * 7 + 7),
  );
  await applyLayer(Readable.from(chunks), { root, maxBytes: 1 << 30 });
  assert.equal(await readFile(join(root, "etc/zstd-layer"), "utf8"), "from a zstd layer\n");
});

it("stops at the size bound and on a corrupt archive", async () => {
  const { root } = await freshRoot();
  await assert.rejects(
    applyLayer(Readable.from([makeTar([{ path: "f", content: "x".repeat(2000) }])]), {
      root,
      maxBytes: 1000,
    }),
    (err: Error & { reason?: string }) =>
      err.reason === "image_invalid" && /more than 1000 bytes/.test(err.message),
  );
  const corrupt = makeTar([{ path: "f", content: "abc" }]);
  corrupt.write("garbage", 100);
  await assert.rejects(
    applyLayer(Readable.from([corrupt]), { root, maxBytes: 1 << 30 }),
    (err: Error & { reason?: string }) => err.reason === "image_invalid",
  );
});

it("sets no owner, mode or time through a link that replaced a directory of the same layer", async () => {
  const { root, outside } = await freshRoot();
  const secret = join(outside, "secret");
  const before = await stat(secret);
  await apply(
    root,
    makeTar([
      { path: "d/", type: "Directory", mode: 0o7777 },
      { path: "d", type: "SymbolicLink", linkpath: secret },
      { path: "e/", type: "Directory", mode: 0o4777 },
      { path: "e", type: "SymbolicLink", linkpath: outside },
    ]),
  );
  assert.equal((await readlink(join(root, "d"))).toString(), secret);
  const after = await stat(secret);
  assert.deepEqual(
    [after.mode, after.mtimeMs, after.uid],
    [before.mode, before.mtimeMs, before.uid],
    "the host file's mode, time and owner are its own",
  );
  const dir = await stat(outside);
  assert.notEqual(dir.mtimeMs, 1_700_000_000_000, "the host directory's time is its own");
  assert.equal(await readFile(secret, "utf8"), "untouched");
});

it("removes nothing outside the root for a whiteout of . or ..", async () => {
  const { root, outside } = await freshRoot();
  for (const path of [".wh...", ".wh..", "sub/.wh..."]) {
    await apply(root, makeTar([{ path: "sub/keep", content: "k" }, { path }])).catch(() => {});
  }
  assert.equal(await readFile(join(outside, "secret"), "utf8"), "untouched");
  assert.equal(await readFile(join(root, "sub/keep"), "utf8"), "k");
});
