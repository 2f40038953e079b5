import assert from "node:assert/strict";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { after, it } from "node:test";
import { WarrenError } from "../shared/index.js";
import { BuildFiles } from "./build-files.js";

const HASH = "c".repeat(64);
const dir = await mkdtemp(join(tmpdir(), "warren-build-files-"));
after(() => rm(dir, { recursive: true, force: true }));

function link(query: string): { expires?: string; signature?: string } {
  return Object.fromEntries(new URLSearchParams(query));
}

function reason(err: unknown): string | undefined {
  return err instanceof WarrenError ? err.reason : undefined;
}

it("stores an upload made through its signed link, once", async () => {
  const files = new BuildFiles(join(dir, "a"), 1024);
  assert.equal(await files.has(HASH), false);
  await files.accept(
    "tpl",
    HASH,
    link(files.signedQuery("tpl", HASH)),
    Readable.from([Buffer.from("tar bytes")]),
  );
  assert.equal(await files.has(HASH), true);
  assert.equal((await readFile(files.path(HASH))).toString(), "tar bytes");
});

it("refuses a link for another template or file, a forged one and an expired one", async () => {
  const files = new BuildFiles(join(dir, "b"), 1024);
  const body = () => Readable.from([Buffer.from("x")]);
  const good = link(files.signedQuery("tpl", HASH));
  const cases = [
    files.accept("other", HASH, good, body()),
    files.accept("tpl", "d".repeat(64), good, body()),
    files.accept("tpl", HASH, { ...good, signature: "00".repeat(32) }, body()),
    files.accept("tpl", HASH, {}, body()),
    files.accept(
      "tpl",
      HASH,
      link(files.signedQuery("tpl", HASH, Date.now() - 2 * 3600_000)),
      body(),
    ),
  ];
  for (const attempt of cases) {
    await assert.rejects(attempt, (err) => reason(err) === "upload_link_invalid");
  }
  assert.equal(await files.has(HASH), false);
});

it("refuses an upload over the limit and leaves no partial file", async () => {
  const files = new BuildFiles(join(dir, "c"), 10);
  await assert.rejects(
    files.accept(
      "tpl",
      HASH,
      link(files.signedQuery("tpl", HASH)),
      Readable.from([Buffer.alloc(6), Buffer.alloc(6)]),
    ),
    (err) => reason(err) === "payload_too_large",
  );
  assert.deepEqual(await readdir(join(dir, "c")), []);
});

it("says a COPY's files were never uploaded", async () => {
  const files = new BuildFiles(join(dir, "d"), 10);
  await assert.rejects(files.read(HASH), /never uploaded/);
  assert.throws(() => files.path("../../etc/passwd"), /not a sha256/);
});
