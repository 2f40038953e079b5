import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readdir, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { after, it } from "node:test";
import { DiskSpace } from "../orchestrator/index.js";
import { Quota, WarrenError } from "../shared/index.js";
import { BuildFiles, sha256Of } from "./build-files.js";

const HASH = "c".repeat(64);
const dir = await mkdtemp(join(tmpdir(), "warren-build-files-"));
after(() => rm(dir, { recursive: true, force: true }));

function link(query: string): { expires?: string; signature?: string } {
  return Object.fromEntries(new URLSearchParams(query));
}

function reason(err: unknown): string | undefined {
  return err instanceof WarrenError ? err.reason : undefined;
}

function sha256(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

function filesIn(name: string, options: { maxBytes?: number; quotaBytes?: number } = {}) {
  const quota = new Quota("upload bytes", () => options.quotaBytes ?? Number.POSITIVE_INFINITY);
  const files = new BuildFiles({
    dir: join(dir, name),
    maxBytes: options.maxBytes ?? 1024,
    quota,
    disk: new DiskSpace(dir, 0),
  });
  const upload = (templateId: string, hash: string, body: Readable, declaredBytes?: number) =>
    files.accept(templateId, hash, link(files.signedQuery(templateId, hash)), body, {
      declaredBytes,
    });
  return { files, quota, upload };
}

async function contentOf(files: BuildFiles, templateId: string, hash: string) {
  const { digest, handle } = await files.open(templateId, hash);
  try {
    return { digest, text: (await handle.readFile()).toString() };
  } finally {
    await handle.close();
  }
}

it("stores an upload made through its signed link under its template, with its bytes' digest", async () => {
  const { files, quota, upload } = filesIn("a");
  assert.equal(await files.has("tpl", HASH), false);
  await upload("tpl", HASH, Readable.from([Buffer.from("tar bytes")]));
  assert.equal(await files.has("tpl", HASH), true);
  assert.equal(await files.has("other", HASH), false, "another template's files are its own");
  assert.deepEqual(await contentOf(files, "tpl", HASH), {
    digest: sha256("tar bytes"),
    text: "tar bytes",
  });
  assert.equal(quota.used(), 9);
});

it("a re-upload replaces the files, counted once", async () => {
  const { files, quota, upload } = filesIn("replace");
  await upload("tpl", HASH, Readable.from([Buffer.from("first")]));
  await upload("tpl", HASH, Readable.from([Buffer.from("second!")]));
  assert.equal((await contentOf(files, "tpl", HASH)).text, "second!");
  assert.equal((await readdir(join(dir, "replace", "tpl"))).length, 1);
  await upload("tpl", HASH, Readable.from([Buffer.from("second!")]));
  assert.equal(quota.used(), 7);
});

it("an archive opened for a build stays readable when it is replaced or collected", async () => {
  const { files, upload } = filesIn("opened");
  await upload("tpl", HASH, Readable.from([Buffer.from("first")]));
  const opened = await files.open("tpl", HASH);
  await upload("tpl", HASH, Readable.from([Buffer.from("second")]));
  await files.collect(0);
  assert.equal((await opened.handle.readFile()).toString(), "first");
  await opened.handle.close();
});

it("refuses a link for another template or file, a forged one and an expired one", async () => {
  const { files } = filesIn("b");
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
  assert.equal(await files.has("tpl", HASH), false);
});

it("refuses an upload over the limit and leaves no partial file nor quota taken", async () => {
  const { quota, upload } = filesIn("c", { maxBytes: 10 });
  await assert.rejects(
    upload("tpl", HASH, Readable.from([Buffer.alloc(6), Buffer.alloc(6)])),
    (err) => reason(err) === "payload_too_large",
  );
  assert.deepEqual(await readdir(join(dir, "c", "tpl")), []);
  assert.equal(quota.used(), 0);
});

it("counts uploads against the quota: a declared size before reading, others as they come", async () => {
  const { files, quota, upload } = filesIn("quota", { quotaBytes: 10 });
  let read = false;
  const unread = new Readable({
    read() {
      read = true;
      this.push(null);
    },
  });
  await assert.rejects(upload("t1", HASH, unread, 11), (err) => reason(err) === "quota_exceeded");
  assert.equal(read, false, "refused before reading");
  await upload("t1", HASH, Readable.from([Buffer.alloc(6)]));
  await assert.rejects(
    upload("t2", HASH, Readable.from([Buffer.alloc(3), Buffer.alloc(3)])),
    (err) => reason(err) === "quota_exceeded" && /upload bytes/.test(String(err)),
  );
  assert.equal(quota.used(), 6, "the refused upload gave back what it had taken");
  await files.drop("t1");
  assert.equal(quota.used(), 0);
  await upload("t2", HASH, Readable.from([Buffer.alloc(3), Buffer.alloc(3)]));
});

it("collects uploads unused past the retention and crash leftovers; counts the rest again", async () => {
  const { files, quota, upload } = filesIn("collect");
  await upload("old", HASH, Readable.from([Buffer.from("old bytes")]));
  await upload("new", HASH, Readable.from([Buffer.from("new")]));
  const [stored] = await readdir(join(dir, "collect", "old"));
  const hourAgo = new Date(Date.now() - 3600_000);
  await utimes(join(dir, "collect", "old", stored ?? ""), hourAgo, hourAgo);
  await writeFile(join(dir, "collect", "new", ".abc.partial"), "half");
  await mkdir(join(dir, "collect", "gone"));
  await files.collect(60_000);
  assert.equal(await files.has("old", HASH), false, "unused for an hour: collected");
  assert.equal(await files.has("new", HASH), true);
  assert.deepEqual(await readdir(join(dir, "collect")), ["new"]);
  assert.deepEqual(await readdir(join(dir, "collect", "new")), [`${HASH}.${sha256("new")}.tar`]);
  assert.equal(quota.used(), 3);
  quota.clear();
  await files.recount();
  assert.equal(quota.used(), 3);
});

it("checks a Content-Digest against the bytes", async () => {
  const { files } = filesIn("digest");
  const accept = (text: string, digest: string) =>
    files.accept("tpl", HASH, link(files.signedQuery("tpl", HASH)), Readable.from([text]), {
      contentDigest: digest,
    });
  const b64 = (text: string) => createHash("sha256").update(text).digest("base64");
  await assert.rejects(accept("abc", `sha-256=:${b64("abd")}:`), /do not match/);
  await assert.rejects(accept("abc", "sha-256=:bm90IDMyIGJ5dGVz:"), /32 bytes/);
  assert.equal(await files.has("tpl", HASH), false);
  await accept("abc", `sha-512=:AAAA:, sha-256=:${b64("abc")}:`);
  assert.equal(await files.has("tpl", HASH), true);
  assert.equal(sha256Of("sha-512=:AAAA:"), undefined, "no sha-256: nothing to check");
});

it("says a COPY's files were never uploaded; refuses a bad hash or template id", async () => {
  const { files } = filesIn("d");
  await assert.rejects(files.open("tpl", HASH), /never uploaded/);
  await assert.rejects(files.has("tpl", "../../etc/passwd"), /not a sha256/);
  await assert.rejects(files.has("../tpl", HASH), /not a template id/);
});
