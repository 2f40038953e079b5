import assert from "node:assert/strict";
import { readdir, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { it } from "node:test";
import { pathToFileURL } from "node:url";
import { makeSnapshot, reason, tempDir } from "../../test/contracts/shared-store.contract.js";
import { FsSharedStore } from "./fs-shared-store.js";
import { openSharedStore } from "./open-shared-store.js";
import { S3SharedStore } from "./s3-shared-store.js";

it("fs store: sweep removes old temporaries a crashed publish left", async (t) => {
  const root = await tempDir(t, "sweep");
  const src = await tempDir(t, "sweep-src");
  const store = new FsSharedStore(root);
  await store.publish("kept", src, await makeSnapshot(src, { a: Buffer.from("a") }));
  const old = new Date(Date.now() - 2 * 24 * 3600 * 1000);
  for (const path of [join(root, "files", "kept", ".a.1.tmp"), join(root, "manifests", ".x.tmp")]) {
    await writeFile(path, "partial");
    await utimes(path, old, old);
  }
  await writeFile(join(root, "manifests", ".young.tmp"), "in flight elsewhere");
  assert.equal(await store.sweep(), 1);
  assert.deepEqual(await readdir(join(root, "files", "kept")), ["a"]);
  assert.deepEqual((await readdir(join(root, "manifests"))).sort(), [".young.tmp", "kept.json"]);
  assert.deepEqual(await store.list(), ["kept"]);
});

it("openSharedStore: paths and file URLs are filesystems, s3:// is a bucket", async () => {
  const fs = openSharedStore("/srv/warren//store/");
  assert.ok(fs instanceof FsSharedStore);
  assert.equal(fs.root, "/srv/warren/store/");
  const url = openSharedStore(pathToFileURL("/srv/a b").href);
  assert.ok(url instanceof FsSharedStore && url.root === "/srv/a b");
  const s3 = openSharedStore("s3://bucket/some/prefix", {
    region: "eu-west-1",
    endpoint: "http://127.0.0.1:1",
  });
  assert.ok(s3 instanceof S3SharedStore);
  await s3.close();
  for (const spec of ["relative/path", "s3://", "http://x/y", "file://host/x"])
    assert.throws(() => openSharedStore(spec, { region: "r" }), reason("invalid_argument"));
  assert.throws(() => openSharedStore("s3://bucket/p"), reason("invalid_argument"));
});
