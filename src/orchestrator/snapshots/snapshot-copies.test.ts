import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { it, type TestContext } from "node:test";
import { makeSnapshot, reason, tempDir } from "../../../test/contracts/shared-store.contract.js";
import type { Logger } from "../../shared/index.js";
import { FsSharedStore } from "../../store/index.js";
import { LifecycleEvents } from "../lifecycle-events.js";
import { SnapshotCopies, type SnapshotCopiesOptions } from "./snapshot-copies.js";

const MiB = 1024 * 1024;

/** Copies record no sandbox history. */
const eventsTo = (logger: Logger) =>
  new LifecycleEvents({ logger, catalog: { recordEvent: async () => {} } });

/**
 * A real fs shared store holding snapshots a, b, c, d of 1 MiB each, and copies of them for
 * a node's snapshots directory, counting fetches; `retained` is what the node stands on.
 */
async function setup(t: TestContext, options: Partial<SnapshotCopiesOptions> = {}) {
  const store = new FsSharedStore(await tempDir(t, "copies-store"));
  const contents = new Map<string, Buffer>();
  for (const id of ["a", "b", "c", "d"]) {
    const src = await tempDir(t, `copies-src-${id}`);
    const data = randomBytes(MiB);
    contents.set(id, data);
    await store.publish(id, src, await makeSnapshot(src, { "memory.img": data }));
  }
  const dir = await tempDir(t, "copies-snapshots");
  const fetches: string[] = [];
  const warnings: string[] = [];
  const retained = new Set<string>();
  const logger: Logger = {
    debug() {},
    info() {},
    warn: (_fields, event) => warnings.push(event),
    error() {},
  };
  const copies = new SnapshotCopies({
    dir,
    maxBytes: 2 * MiB,
    fetch: (id, intoDir) => {
      fetches.push(id);
      return store.fetch(id, intoDir);
    },
    retained: async () => retained,
    logger,
    events: eventsTo(logger),
    graceMs: 0,
    ...options,
  });
  const onDisk = async () => (await readdir(dir)).sort();
  return { store, contents, dir, fetches, warnings, retained, copies, onDisk };
}

/** Moves time on by a millisecond, so that the next use is later than the last. */
const tick = () => new Promise((resolve) => setTimeout(resolve, 2));

it("fetches a snapshot once however many restores want it at once, and keeps it", async (t) => {
  const { contents, dir, fetches, copies, onDisk } = await setup(t);
  await Promise.all([copies.ensure("a", MiB), copies.ensure("a", MiB), copies.ensure("a", MiB)]);
  assert.deepEqual(fetches, ["a"]);
  const data = await readFile(join(dir, "a", "memory.img"));
  assert.ok(data.equals(contents.get("a") as Buffer), "the copy holds the published bytes");
  await copies.ensure("a", MiB);
  assert.deepEqual(fetches, ["a"], "a kept copy is not fetched again");
  assert.equal(copies.usedBytes, MiB);
  assert.deepEqual(await onDisk(), ["a"]);
});

it("makes room before a fetch: the least recently used copy nothing stands on goes", async (t) => {
  const { fetches, copies, onDisk } = await setup(t);
  await copies.ensure("a", MiB);
  await tick();
  await copies.ensure("b", MiB);
  await tick();
  await copies.ensure("a", MiB); // a used again: b is now the least recent
  await tick();
  await copies.ensure("c", MiB);
  assert.deepEqual(await onDisk(), ["a", "c"]);
  assert.equal(copies.has("b"), false);
  assert.equal(copies.usedBytes, 2 * MiB);
  await copies.ensure("b", MiB);
  assert.deepEqual(fetches, ["a", "b", "c", "b"], "an evicted copy is fetched again");
  assert.deepEqual(await onDisk(), ["b", "c"]);
});

it("never evicts a copy this node stands on; over budget it keeps them all and says so", async (t) => {
  const { copies, retained, warnings, onDisk } = await setup(t);
  retained.add("a").add("b");
  await copies.ensure("a", MiB);
  await tick();
  await copies.ensure("b", MiB);
  await copies.ensure("c", MiB);
  assert.deepEqual(await onDisk(), ["a", "b", "c"], "the restore is not failed");
  assert.ok(warnings.includes("snapshot_copies.over_budget"));
  retained.clear();
  retained.add("c");
  assert.deepEqual(await copies.evict(), ["a"]);
  assert.deepEqual(await onDisk(), ["b", "c"]);
});

it("keeps a copy used within the grace period, before anything records a sandbox on it", async (t) => {
  const { copies, onDisk } = await setup(t, { graceMs: 60_000 });
  await copies.ensure("a", MiB);
  await copies.ensure("b", MiB);
  await copies.ensure("c", MiB);
  assert.deepEqual(await onDisk(), ["a", "b", "c"]);
});

it("a failed fetch leaves nothing and holds no room; the next try fetches again", async (t) => {
  const { copies, fetches, onDisk } = await setup(t);
  await assert.rejects(copies.ensure("missing", MiB), reason("snapshot_not_found"));
  assert.deepEqual(await onDisk(), []);
  await copies.ensure("a", MiB);
  await copies.ensure("b", MiB);
  assert.deepEqual(await onDisk(), ["a", "b"], "the failed fetch's bytes were given back");
  await assert.rejects(copies.ensure("missing", MiB), reason("snapshot_not_found"));
  assert.deepEqual(fetches, ["missing", "a", "b", "missing"]);
});

it("drop removes a copy at once, also one still being fetched", async (t) => {
  const { copies, onDisk } = await setup(t);
  await copies.ensure("a", MiB);
  await copies.drop("a");
  assert.deepEqual(await onDisk(), []);
  assert.equal(copies.usedBytes, 0);
  const fetching = copies.ensure("b", MiB);
  await copies.drop("b");
  await fetching;
  assert.deepEqual(await onDisk(), [], "dropped once its fetch landed");
  await copies.drop("never-fetched");
});

it("adopts what a previous run left and brings it within the budget, oldest first", async (t) => {
  const { dir, copies: first } = await setup(t, { maxBytes: 10 * MiB });
  for (const id of ["a", "b", "c"]) {
    await first.ensure(id, MiB);
    await tick();
  }
  const { retained } = await setup(t);
  const warnings: string[] = [];
  const logger: Logger = {
    debug() {},
    info() {},
    warn: (_f, e) => warnings.push(e),
    error() {},
  };
  const next = new SnapshotCopies({
    dir,
    maxBytes: MiB,
    fetch: async () => assert.fail("nothing is fetched"),
    retained: async () => retained,
    logger,
    events: eventsTo(logger),
    graceMs: 0,
  });
  retained.add("a");
  for (const id of ["a", "b", "c"]) next.adopt(id, MiB, (await stat(join(dir, id))).mtimeMs);
  assert.deepEqual((await next.evict()).sort(), ["b", "c"]);
  assert.deepEqual(await readdir(dir), ["a"]);
  await next.ensure("a", MiB);
  assert.deepEqual(warnings, [], "within the budget again");
});
