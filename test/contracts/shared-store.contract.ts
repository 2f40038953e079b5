// What every SharedStore must do, run against each implementation on a real store of its
// kind (test/unit/contracts/shared-store.test.ts).
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it, type TestContext } from "node:test";
import { WarrenError } from "../../src/shared/index.js";
import type { SharedStore, StoreFile } from "../../src/store/index.js";

export interface StoreHarness {
  readonly store: SharedStore;
  /** Writes bytes where file `name` of `id` lives, behind the store's back. */
  putRaw(id: string, name: string, data: Buffer): Promise<void>;
  /** Names of what the store holds for `id`'s files (temporaries included). */
  rawFiles(id: string): Promise<string[]>;
  cleanup(): Promise<void>;
}

/** Big enough for three parts at S3's smallest part size. */
export const BIG_FILE_BYTES = 11 * 1024 * 1024 + 123;

/** Writes a snapshot directory and returns its file records (what the catalog would hold). */
export async function makeSnapshot(
  dir: string,
  contents: Readonly<Record<string, Buffer>>,
): Promise<StoreFile[]> {
  await mkdir(dir, { recursive: true });
  const files: StoreFile[] = [];
  for (const [name, data] of Object.entries(contents)) {
    await writeFile(join(dir, name), data);
    files.push({
      name,
      bytes: data.length,
      sha256: createHash("sha256").update(data).digest("hex"),
    });
  }
  return files;
}

/** A temporary directory removed after the test. */
export async function tempDir(t: TestContext, label: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), `warren-store-${label}-`));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

export function reason(expected: string): (err: unknown) => boolean {
  return (err: unknown) => {
    assert.ok(err instanceof WarrenError, `a WarrenError, got ${String(err)}`);
    assert.equal(err.reason, expected, err.message);
    return true;
  };
}

const newId = () => `snap-${randomBytes(6).toString("hex")}`;

export function sharedStoreContract(name: string, open: () => Promise<StoreHarness>): void {
  describe(`SharedStore contract: ${name}`, () => {
    async function setup(t: TestContext) {
      const h = await open();
      t.after(() => h.cleanup());
      const work = await tempDir(t, name);
      return { h, store: h.store, src: join(work, "src"), out: join(work, "out") };
    }

    it("publishes and fetches a snapshot, big files included, checked end to end", async (t) => {
      const { store, src, out } = await setup(t);
      const big = randomBytes(BIG_FILE_BYTES);
      const files = await makeSnapshot(src, {
        "meta.json": Buffer.from('{"v":1}'),
        "memory.img": big,
        empty: Buffer.alloc(0),
      });
      const id = newId();
      const published = await store.publish(id, src, files);
      assert.deepEqual(published.files, files);
      assert.deepEqual(await store.manifest(id), published);
      assert.deepEqual(await store.list(), [id]);

      const into = join(out, id);
      assert.deepEqual(await store.fetch(id, into), published);
      assert.deepEqual((await readdir(into)).sort(), ["empty", "memory.img", "meta.json"]);
      assert.ok((await readFile(join(into, "memory.img"))).equals(big));
      assert.equal((await stat(join(into, "meta.json"))).mode & 0o777, 0o400);
      assert.deepEqual(await readdir(out), [id], "no temporary left beside it");
      await assert.rejects(store.fetch(id, into), reason("already_exists"));
    });

    it("fetches one snapshot into two places at once", async (t) => {
      const { store, src, out } = await setup(t);
      const files = await makeSnapshot(src, { disk: randomBytes(3 * 1024 * 1024) });
      const id = newId();
      await store.publish(id, src, files);
      await Promise.all([store.fetch(id, join(out, "a")), store.fetch(id, join(out, "b"))]);
      const [a, b] = await Promise.all(["a", "b"].map((d) => readFile(join(out, d, "disk"))));
      assert.ok(a?.equals(b as Buffer));
      assert.deepEqual((await readdir(out)).sort(), ["a", "b"]);
    });

    it("shows nothing of a publish until its manifest is written", async (t) => {
      const { h, store, src, out } = await setup(t);
      const files = await makeSnapshot(src, { "memory.img": randomBytes(BIG_FILE_BYTES) });
      const id = newId();
      const publishing = store.publish(id, src, files);
      assert.equal(await store.manifest(id), undefined);
      await publishing;
      assert.ok(await store.manifest(id));

      // A publish that died after its files: invisible, swept once old enough.
      const dead = newId();
      await h.putRaw(dead, "memory.img", randomBytes(1024));
      assert.equal(await store.manifest(dead), undefined);
      assert.deepEqual(await store.list(), [id]);
      await assert.rejects(store.fetch(dead, join(out, dead)), reason("snapshot_not_found"));
      assert.deepEqual(await readdir(out).catch(() => []), []);
      assert.equal(await store.sweep(), 0, "too young: could be a publish in flight");
      assert.equal(await store.sweep(0), 1);
      assert.deepEqual(await h.rawFiles(dead), []);
      assert.deepEqual(await h.rawFiles(id), ["memory.img"], "a published one is kept");
    });

    it("refuses a corrupted or missing file and leaves nothing behind", async (t) => {
      const { h, store, src, out } = await setup(t);
      const memory = randomBytes(2 * 1024 * 1024);
      const files = await makeSnapshot(src, {
        "meta.json": Buffer.from("{}"),
        "memory.img": memory,
      });
      const id = newId();
      await store.publish(id, src, files);

      const flipped = Buffer.from(memory);
      flipped[12345] = (flipped[12345] ?? 0) ^ 1;
      await h.putRaw(id, "memory.img", flipped);
      await assert.rejects(store.fetch(id, join(out, "x")), reason("snapshot_tampered"));
      await h.putRaw(id, "memory.img", Buffer.concat([memory, Buffer.from("more")]));
      await assert.rejects(store.fetch(id, join(out, "x")), reason("snapshot_tampered"));
      await h.putRaw(id, "memory.img", memory.subarray(1));
      await assert.rejects(store.fetch(id, join(out, "x")), reason("snapshot_tampered"));
      assert.deepEqual(await readdir(out), [], "neither the directory nor a temporary");

      await h.putRaw(id, "memory.img", memory);
      await store.fetch(id, join(out, "x"));
      assert.deepEqual(await readdir(out), ["x"]);
    });

    it("is idempotent per id, and an id's files never change", async (t) => {
      const { store, src } = await setup(t);
      const files = await makeSnapshot(src, { "meta.json": Buffer.from("{}") });
      const id = newId();
      const first = await store.publish(id, src, files);
      assert.deepEqual(await store.publish(id, src, [...files].reverse()), first);
      const other = await makeSnapshot(src, { "meta.json": Buffer.from("{ }") });
      await assert.rejects(store.publish(id, src, other), reason("already_exists"));
      assert.deepEqual(await store.manifest(id), first);
    });

    it("refuses to publish a local file that does not match its record", async (t) => {
      const { store, src } = await setup(t);
      const files = await makeSnapshot(src, { "memory.img": randomBytes(BIG_FILE_BYTES) });
      const record = files[0] as StoreFile;
      const id = newId();
      const lying = [{ ...record, sha256: "0".repeat(64) }];
      await assert.rejects(store.publish(id, src, lying), reason("snapshot_tampered"));
      const short = [{ ...record, bytes: record.bytes - 1 }];
      await assert.rejects(store.publish(id, src, short), reason("snapshot_tampered"));
      assert.equal(await store.manifest(id), undefined);
      await assert.rejects(
        store.publish(id, src, [{ ...record, name: "nope" }]),
        reason("not_found"),
      );
    });

    it("deletes the manifest and the files", async (t) => {
      const { h, store, src, out } = await setup(t);
      const files = await makeSnapshot(src, { a: randomBytes(10), b: randomBytes(20) });
      const [id, kept] = [newId(), newId()];
      await store.publish(id, src, files);
      await store.publish(kept, src, files);
      await store.delete(id);
      assert.equal(await store.manifest(id), undefined);
      assert.deepEqual(await store.list(), [kept]);
      assert.deepEqual(await h.rawFiles(id), []);
      await assert.rejects(store.fetch(id, join(out, id)), reason("snapshot_not_found"));
      await store.delete(id);
      assert.deepEqual(await h.rawFiles(kept), ["a", "b"]);
    });

    it("refuses ids and names that are not plain names", async (t) => {
      const { store, src } = await setup(t);
      const files = await makeSnapshot(src, { a: Buffer.from("x") });
      for (const id of ["", "..", "a/b", ".hidden", "x".repeat(200)])
        await assert.rejects(store.publish(id, src, files), reason("invalid_argument"));
      const bad = [{ ...(files[0] as StoreFile), name: "../a" }];
      await assert.rejects(store.publish(newId(), src, bad), reason("invalid_argument"));
      await assert.rejects(store.manifest("../etc"), reason("invalid_argument"));
    });
  });
}
