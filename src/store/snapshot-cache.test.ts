import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, readdir, readFile, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { it, type TestContext } from "node:test";
import type { Logger } from "../shared/index.js";
import { FsSharedStore } from "./fs-shared-store.js";
import { makeSnapshot, reason, tempDir } from "./shared-store.contract.js";
import type { SharedStore } from "./shared-store.js";
import { SnapshotCache, type SnapshotCacheOptions } from "./snapshot-cache.js";

const MiB = 1024 * 1024;

/** An fs store holding snapshots `a`, `b`, `c`… of 1 MiB each, counting fetches. */
async function setup(t: TestContext, ids = ["a", "b", "c"]) {
  const store = new FsSharedStore(await tempDir(t, "cache-store"));
  const contents = new Map<string, Buffer>();
  for (const id of ids) {
    const src = await tempDir(t, `cache-src-${id}`);
    const data = randomBytes(MiB);
    contents.set(id, data);
    await store.publish(id, src, await makeSnapshot(src, { "memory.img": data }));
  }
  const fetches: string[] = [];
  const counting: Pick<SharedStore, "manifest" | "fetch"> = {
    manifest: (id) => store.manifest(id),
    fetch: (id, into) => {
      fetches.push(id);
      return store.fetch(id, into);
    },
  };
  const dir = join(await tempDir(t, "cache"), "snapshot-cache");
  const warnings: string[] = [];
  const logger: Logger = {
    debug() {},
    info() {},
    warn: (_fields, event) => warnings.push(event),
    error() {},
  };
  const open = (maxBytes: number, options: Partial<SnapshotCacheOptions> = {}) =>
    SnapshotCache.open({ store: counting, dir, maxBytes, logger, ...options });
  return { store, contents, fetches, dir, warnings, open };
}

it("fetches a snapshot once however many ask for it at once", async (t) => {
  const { contents, fetches, dir, open } = await setup(t);
  const cache = await open(10 * MiB);
  const dirs = await Promise.all([cache.ensure("a"), cache.pin("a"), cache.ensure("a")]);
  assert.deepEqual(fetches, ["a"]);
  assert.equal(dirs[0], join(dir, "a"));
  assert.equal(dirs[0], dirs[2]);
  const data = await readFile(join(dir, "a", "memory.img"));
  assert.ok(data.equals(contents.get("a") as Buffer));
  assert.equal(await cache.ensure("a"), join(dir, "a"));
  assert.deepEqual(fetches, ["a"], "a cached snapshot is not fetched again");
  assert.equal(cache.usedBytes, MiB);
  await assert.rejects(cache.ensure("missing"), reason("snapshot_not_found"));
  await assert.rejects(cache.pin("../x"), reason("invalid_argument"));
  assert.deepEqual(await readdir(dir), ["a"], "a failed fetch leaves nothing");
});

it("evicts the least recently used unpinned snapshot when over budget", async (t) => {
  const { fetches, dir, open } = await setup(t, ["a", "b", "c", "d"]);
  const cache = await open(2.5 * MiB);
  await cache.ensure("a");
  await cache.ensure("b");
  await cache.ensure("a"); // a is now more recent than b
  await cache.ensure("c");
  assert.deepEqual((await readdir(dir)).sort(), ["a", "c"]);
  assert.ok(!cache.has("b"));
  await cache.ensure("b");
  assert.deepEqual((await readdir(dir)).sort(), ["b", "c"], "a was the least recent");
  assert.deepEqual(fetches, ["a", "b", "c", "b"]);

  // Pinned snapshots stay; the least recent unpinned one goes instead.
  const pinB = await cache.pin("b");
  await cache.ensure("c");
  await cache.ensure("d");
  assert.deepEqual((await readdir(dir)).sort(), ["b", "d"]);
  assert.equal(pinB.dir, join(dir, "b"));
  pinB.release();
  pinB.release();
  assert.equal(await cache.remove("b"), true);
  assert.deepEqual(await readdir(dir), ["d"]);
});

it("stays over budget rather than evict a pinned snapshot", async (t) => {
  const { dir, warnings, open } = await setup(t);
  const cache = await open(1.5 * MiB);
  const pins = [await cache.pin("a"), await cache.pin("b")];
  assert.deepEqual((await readdir(dir)).sort(), ["a", "b"]);
  assert.ok(warnings.includes("snapshot_cache.over_budget"));
  const result = await cache.evict();
  assert.deepEqual(result, { evicted: [], overBudgetBytes: 0.5 * MiB });
  assert.equal(await cache.remove("a"), false, "pinned");

  // A second pin of one snapshot holds it until both are released.
  const again = await cache.pin("a");
  pins[0]?.release();
  assert.ok(cache.has("a"));
  again.release(); // unpinned and over budget: evicted in the background
  await cache.close();
  assert.deepEqual(await readdir(dir), ["b"]);
  assert.equal(cache.usedBytes, MiB);
  pins[1]?.release();
});

it("rebuilds its index at open: recency from mtimes, leftovers removed", async (t) => {
  const { fetches, dir, open } = await setup(t);
  const first = await open(10 * MiB);
  await first.ensure("a");
  await first.ensure("b");
  await first.ensure("c");
  await first.close();
  // A fetch and an eviction a crash cut short; a stranger's file is left alone.
  await mkdir(join(dir, ".d.0123.fetching"));
  await writeFile(join(dir, ".d.0123.fetching", "memory.img"), "partial");
  await mkdir(join(dir, ".a.4567.evicting"));
  await writeFile(join(dir, "README"), "not a snapshot");
  const at = (s: number) => new Date(Date.now() - s * 1000);
  await utimes(join(dir, "a"), at(30), at(30));
  await utimes(join(dir, "b"), at(10), at(10));
  await utimes(join(dir, "c"), at(20), at(20));

  const cache = await open(2 * MiB);
  assert.deepEqual((await readdir(dir)).sort(), ["README", "b", "c"], "a was the oldest");
  assert.equal(cache.usedBytes, 2 * MiB);
  await cache.ensure("c");
  await cache.ensure("a");
  assert.deepEqual((await readdir(dir)).sort(), ["README", "a", "c"]);
  assert.deepEqual(fetches, ["a", "b", "c", "a"]);
  await assert.rejects(open(-1), reason("invalid_argument"));
});
