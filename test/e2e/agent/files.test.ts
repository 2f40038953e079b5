// envd filesystem through the real E2B SDK (debug mode: it talks to the envd on localhost:49983).
// Covers /files upload/download and the Filesystem RPCs (Stat, MakeDir, Move, ListDir, Remove).
import assert from "node:assert/strict";
import { randomBytes, randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdir, rm } from "node:fs/promises";
import { after, afterEach, before, describe, it, type TestContext } from "node:test";
import {
  type EntryInfo,
  FileNotFoundError,
  InvalidArgumentError,
  NotFoundError,
  Sandbox,
} from "e2b";
import { type RunningEnvd, startEnvd, userWorkdir } from "../../helpers/envd.js";

let env: RunningEnvd;
let sbx: Sandbox;

before(async () => {
  env = await startEnvd();
  sbx = await Sandbox.create();
});

after(async () => {
  await env?.stop();
});

// Keeps tests independent: if a test crashed the agent, the next one gets a fresh envd.
afterEach(async () => {
  if (env.process.exitCode !== null || env.process.signalCode !== null) env = await startEnvd();
});

const utf8 = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");

function closeToNow(date: Date | undefined): void {
  assert.ok(date instanceof Date, "modifiedTime is a Date");
  assert.ok(
    Math.abs(date.getTime() - Date.now()) < 10_000,
    `modifiedTime ${date.toISOString()} is not recent`,
  );
}

describe("files: write and read", () => {
  it("writes a string and reads it back as text", async (t) => {
    const dir = await userWorkdir(t);
    const info = await sbx.files.write(`${dir}/hello.txt`, "hello world");
    assert.deepEqual(
      { ...info },
      { name: "hello.txt", type: "file", path: `${dir}/hello.txt`, metadata: undefined },
    );
    assert.equal(await sbx.files.read(`${dir}/hello.txt`), "hello world");
    await sbx.files.write(`${dir}/hello.txt`, "short");
    assert.equal(await sbx.files.read(`${dir}/hello.txt`), "short", "overwrite truncates");
  });

  it("writes an ArrayBuffer and a Blob; reads them back as bytes and as a Blob", async (t) => {
    const dir = await userWorkdir(t);
    const data = new Uint8Array([0, 1, 2, 250, 255, 10, 13]);
    await sbx.files.write(`${dir}/bin.dat`, data.buffer);
    const bytes = await sbx.files.read(`${dir}/bin.dat`, { format: "bytes" });
    assert.ok(bytes instanceof Uint8Array);
    assert.deepEqual([...bytes], [...data]);
    await sbx.files.write(`${dir}/blob.txt`, new Blob(["blob ", "content ✓"]));
    const blob = await sbx.files.read(`${dir}/blob.txt`, { format: "blob" });
    assert.ok(blob instanceof Blob);
    assert.equal(await blob.text(), "blob content ✓");
  });

  it("writes a ReadableStream and reads it back as a stream", async (t) => {
    const dir = await userWorkdir(t);
    const chunks = ["first chunk\n", "second chunk\n", "third"];
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const chunk of chunks) controller.enqueue(new TextEncoder().encode(chunk));
        controller.close();
      },
    });
    const info = await sbx.files.write(`${dir}/stream.txt`, stream);
    assert.equal(info.path, `${dir}/stream.txt`);
    const out = await sbx.files.read(`${dir}/stream.txt`, { format: "stream" });
    assert.equal(await new Response(out).text(), chunks.join(""));
  });

  it("writes several files in one call: relative, absolute and root-level paths", async (t) => {
    const dir = await userWorkdir(t);
    const rootLevel = `/t-${randomUUID().slice(0, 8)}`;
    t.after(() => rm(rootLevel, { recursive: true, force: true }));
    const files = [
      { path: `${dir}/one.txt`, data: "one" },
      { path: `${dir.slice("/home/user/".length)}/relative.txt`, data: "relative" },
      { path: `${dir}/new/deeper/two.txt`, data: new Uint8Array([50]).buffer },
      { path: `${rootLevel}/multi.txt`, data: "root level" },
    ];
    const infos = await sbx.files.write(files);
    const abs = (path: string) => (path.startsWith("/") ? path : `/home/user/${path}`);
    const byPath = (a: { path: string }, b: { path: string }) => a.path.localeCompare(b.path);
    assert.deepEqual(
      infos.map((i) => ({ ...i })).sort(byPath),
      files
        .map((f) => ({ name: f.path.split("/").pop(), type: "file", path: abs(f.path) }))
        .map((f) => ({ ...f, metadata: undefined }))
        .sort(byPath),
    );
    for (const [i, content] of ["one", "relative", "2", "root level"].entries()) {
      assert.equal(await sbx.files.read(abs(files[i]?.path ?? "")), content);
    }
  });

  it("returns the written files in request order", async (t) => {
    const dir = await userWorkdir(t);
    // The first file needs 20 new directories, so it finishes last if the parts are written
    // concurrently; envd writes them one after another and answers in request order.
    const deep = `${dir}/${Array.from({ length: 20 }, (_, i) => `n${i}`).join("/")}/deep.txt`;
    const infos = await sbx.files.write([
      { path: deep, data: "deep" },
      { path: `${dir}/b.txt`, data: "b" },
      { path: `${dir}/c.txt`, data: "c" },
    ]);
    assert.deepEqual(
      infos.map((i) => i.path),
      [deep, `${dir}/b.txt`, `${dir}/c.txt`],
    );
  });

  it("creates missing parent directories owned by the user", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/a/b/c.txt`, "x");
    for (const path of [`${dir}/a`, `${dir}/a/b`]) {
      const info = await sbx.files.getInfo(path);
      assert.deepEqual(
        [info.type, info.owner, info.group, info.mode, info.permissions],
        ["dir", "user", "user", 0o755, "drwxr-xr-x"],
        path,
      );
    }
    const file = await sbx.files.getInfo(`${dir}/a/b/c.txt`);
    assert.deepEqual([file.owner, file.group, file.mode], ["user", "user", 0o644]);
  });

  it("writes as root when user is root", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/rootdir/r.txt`, "owned by root", { user: "root" });
    const file = await sbx.files.getInfo(`${dir}/rootdir/r.txt`);
    assert.deepEqual([file.owner, file.group, file.mode], ["root", "root", 0o644]);
    const parent = await sbx.files.getInfo(`${dir}/rootdir`);
    assert.deepEqual([parent.owner, parent.group], ["root", "root"]);
    assert.equal(await sbx.files.read(`${dir}/rootdir/r.txt`, { user: "root" }), "owned by root");
  });

  it("reading a missing file throws FileNotFoundError; a directory InvalidArgumentError", async (t) => {
    const dir = await userWorkdir(t);
    const err = await sbx.files.read(`${dir}/missing.txt`).catch((e: unknown) => e);
    assert.ok(err instanceof FileNotFoundError, `got ${String(err)}`);
    assert.ok(err instanceof NotFoundError);
    await assert.rejects(sbx.files.read(dir), InvalidArgumentError);
  });

  it("writing onto a directory path fails and the agent keeps running", async (t) => {
    const dir = await userWorkdir(t);
    await mkdir(`${dir}/sub`);
    for (const useOctetStream of [true, false]) {
      const write = sbx.files.write(`${dir}/sub`, "x", { useOctetStream });
      await assert.rejects(write, InvalidArgumentError);
      await new Promise((resolve) => setTimeout(resolve, 200));
      const died = `envd exited (octet=${useOctetStream}): ${env.output()}`;
      assert.equal(env.process.exitCode, null, died);
    }
    assert.equal((await fetch(`${env.url}/health`)).status, 204);
  });

  it("reading an empty file returns empty text, bytes and blob", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/empty.txt`, "");
    assert.equal(await sbx.files.read(`${dir}/empty.txt`), "");
    assert.equal((await sbx.files.read(`${dir}/empty.txt`, { format: "bytes" })).length, 0);
    assert.equal((await sbx.files.read(`${dir}/empty.txt`, { format: "blob" })).size, 0);
    assert.equal((await sbx.files.getInfo(`${dir}/empty.txt`)).size, 0);
  });

  it("reads procfs and sysfs files, which stat as empty, to their end", async () => {
    const bootId = readFileSync("/proc/sys/kernel/random/boot_id", "utf8");
    assert.match(bootId, /^[0-9a-f-]{36}\n$/);
    assert.equal((await sbx.files.getInfo("/proc/sys/kernel/random/boot_id")).size, 0);
    assert.equal(await sbx.files.read("/proc/sys/kernel/random/boot_id"), bootId);
    assert.equal(await sbx.files.read("/proc/version"), readFileSync("/proc/version", "utf8"));
    assert.equal(await sbx.files.read("/dev/null"), "", "a device is not read");
  });

  it("round-trips with gzip on write and read", async (t) => {
    const dir = await userWorkdir(t);
    const text = "compressible line\n".repeat(5_000);
    const info = await sbx.files.write(`${dir}/gz.txt`, text, { gzip: true });
    assert.equal(info.path, `${dir}/gz.txt`);
    assert.equal((await sbx.files.getInfo(`${dir}/gz.txt`)).size, text.length, "stored plain");
    assert.equal(await sbx.files.read(`${dir}/gz.txt`, { gzip: true }), text);
    const bytes = await sbx.files.read(`${dir}/gz.txt`, { format: "bytes", gzip: true });
    assert.equal(utf8(bytes), text);
  });

  it("round-trips 5 MB of random bytes exactly", async (t) => {
    const dir = await userWorkdir(t);
    const data = randomBytes(5 * 1024 * 1024);
    await sbx.files.write(`${dir}/big.bin`, new Uint8Array(data).buffer);
    assert.equal((await sbx.files.getInfo(`${dir}/big.bin`)).size, data.length);
    const back = await sbx.files.read(`${dir}/big.bin`, { format: "bytes" });
    assert.ok(Buffer.from(back).equals(data), "downloaded bytes differ");
  });

  it("stores metadata, surfaces it on getInfo/list/rename and clears it on overwrite", async (t) => {
    const dir = await userWorkdir(t);
    const metadata = { a: "1", author: "mish" };
    const info = await sbx.files.write(`${dir}/m.txt`, "with metadata", { metadata });
    assert.deepEqual(info.metadata, metadata);
    assert.deepEqual((await sbx.files.getInfo(`${dir}/m.txt`)).metadata, metadata);
    const listed = (await sbx.files.list(dir)).find((e) => e.name === "m.txt");
    assert.deepEqual(listed?.metadata, metadata);
    const renamed = await sbx.files.rename(`${dir}/m.txt`, `${dir}/m2.txt`);
    assert.deepEqual(renamed.metadata, metadata);
    const overwritten = await sbx.files.write(`${dir}/m2.txt`, "no metadata");
    assert.equal(overwritten.metadata, undefined);
    assert.equal((await sbx.files.getInfo(`${dir}/m2.txt`)).metadata, undefined);
  });
});

describe("files: list", () => {
  async function tree(t: TestContext): Promise<string> {
    const root = `${await userWorkdir(t)}/test_directory`;
    for (const sub of ["1/subdir1_1", "1/subdir1_2", "2/subdir2_1", "2/subdir2_2"]) {
      await sbx.files.makeDir(`${root}/subdir${sub}`);
    }
    await sbx.files.write(`${root}/file1.txt`, "test");
    return root;
  }

  it("lists depth 1 (the default) with full entry info", async (t) => {
    const root = await tree(t);
    for (const entries of [await sbx.files.list(root), await sbx.files.list(root, { depth: 1 })]) {
      assert.deepEqual(
        entries.map((e) => [e.name, e.type, e.path]),
        [
          ["file1.txt", "file", `${root}/file1.txt`],
          ["subdir1", "dir", `${root}/subdir1`],
          ["subdir2", "dir", `${root}/subdir2`],
        ],
      );
    }
    const [file, dir] = await sbx.files.list(root);
    const perms = (e?: EntryInfo) => [
      e?.mode,
      e?.permissions,
      e?.owner,
      e?.group,
      e?.symlinkTarget,
    ];
    assert.deepEqual(perms(file), [0o644, "-rw-r--r--", "user", "user", undefined]);
    assert.deepEqual(perms(dir), [0o755, "drwxr-xr-x", "user", "user", undefined]);
    assert.equal(file?.size, 4);
    closeToNow(file?.modifiedTime);
  });

  it("lists depth 2 and 3 in pre-order, lexical order", async (t) => {
    const root = await tree(t);
    const expected = [
      ["file1.txt", "file", `${root}/file1.txt`],
      ["subdir1", "dir", `${root}/subdir1`],
      ["subdir1_1", "dir", `${root}/subdir1/subdir1_1`],
      ["subdir1_2", "dir", `${root}/subdir1/subdir1_2`],
      ["subdir2", "dir", `${root}/subdir2`],
      ["subdir2_1", "dir", `${root}/subdir2/subdir2_1`],
      ["subdir2_2", "dir", `${root}/subdir2/subdir2_2`],
    ];
    for (const depth of [2, 3]) {
      const entries = await sbx.files.list(root, { depth });
      assert.deepEqual(
        entries.map((e) => [e.name, e.type, e.path]),
        expected,
        `depth ${depth}`,
      );
    }
  });

  it("listing a file path fails and a missing path is FileNotFoundError", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/f.txt`, "x");
    await assert.rejects(sbx.files.list(`${dir}/f.txt`), InvalidArgumentError);
    await assert.rejects(sbx.files.list(`${dir}/nope`), FileNotFoundError);
  });
});

describe("files: exists and getInfo", () => {
  it("getInfo of a file", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/test_file.txt`, "test");
    const info = await sbx.files.getInfo(`${dir}/test_file.txt`);
    const { modifiedTime, ...rest } = info;
    assert.deepEqual(rest, {
      name: "test_file.txt",
      type: "file",
      path: `${dir}/test_file.txt`,
      size: 4,
      mode: 0o644,
      permissions: "-rw-r--r--",
      owner: "user",
      group: "user",
      symlinkTarget: undefined,
      metadata: undefined,
    });
    closeToNow(modifiedTime);
  });

  it("getInfo of a directory", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.makeDir(`${dir}/test_dir`);
    const info = await sbx.files.getInfo(`${dir}/test_dir`);
    assert.deepEqual(
      [info.name, info.type, info.path, info.mode, info.permissions, info.owner, info.group],
      ["test_dir", "dir", `${dir}/test_dir`, 0o755, "drwxr-xr-x", "user", "user"],
    );
    assert.ok(info.size > 0);
    closeToNow(info.modifiedTime);
  });

  it("getInfo of a symlink reports the target's type and mode and the absolute target", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/test_file.txt`, "test");
    await sbx.files.makeDir(`${dir}/target_dir`);
    await sbx.commands.run("ln -s test_file.txt link.txt; ln -s target_dir dir_link", { cwd: dir });
    const link = await sbx.files.getInfo(`${dir}/link.txt`);
    const dirLink = await sbx.files.getInfo(`${dir}/dir_link`);
    const fields = (e: EntryInfo) => `${e.name} ${e.path} ${e.type} ${e.symlinkTarget} ${e.owner}`;
    assert.equal(fields(link), `link.txt ${dir}/link.txt file ${dir}/test_file.txt user`);
    assert.equal(fields(dirLink), `dir_link ${dir}/dir_link dir ${dir}/target_dir user`);
    assert.deepEqual([link.permissions, dirLink.permissions], ["Lrwxrwxrwx", "Lrwxrwxrwx"]);
    // envd (shared/pkg/filesystem/entry.go) reports the TARGET's permission bits for a symlink.
    assert.deepEqual([link.mode, dirLink.mode], [0o644, 0o755], "symlink mode = target's");
  });

  it("exists is true for a file and a directory; a missing path is false / FileNotFoundError", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/f.txt`, "x");
    assert.equal(await sbx.files.exists(`${dir}/f.txt`), true);
    assert.equal(await sbx.files.exists(dir), true);
    assert.equal(await sbx.files.exists(`${dir}/missing`), false);
    await assert.rejects(sbx.files.getInfo(`${dir}/missing.txt`), FileNotFoundError);
  });
});

describe("files: makeDir, remove, rename", () => {
  it("makeDir creates nested directories once", async (t) => {
    const dir = await userWorkdir(t);
    assert.equal(await sbx.files.makeDir(`${dir}/x/y/z`), true);
    assert.equal(await sbx.files.makeDir(`${dir}/x/y/z`), false);
    for (const path of [`${dir}/x`, `${dir}/x/y`, `${dir}/x/y/z`]) {
      const info = await sbx.files.getInfo(path);
      assert.deepEqual(
        [info.type, info.owner, info.group, info.mode],
        ["dir", "user", "user", 0o755],
        path,
      );
    }
    await sbx.files.write(`${dir}/f.txt`, "x");
    await assert.rejects(sbx.files.makeDir(`${dir}/f.txt`), InvalidArgumentError, "file there");
  });

  it("remove deletes a file and a whole directory tree; a missing path is not an error", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/f.txt`, "x");
    await sbx.files.write(`${dir}/tree/a/b/deep.txt`, "deep");
    await sbx.files.remove(`${dir}/f.txt`);
    assert.equal(await sbx.files.exists(`${dir}/f.txt`), false);
    await sbx.files.remove(`${dir}/tree`);
    assert.equal(await sbx.files.exists(`${dir}/tree`), false);
    await sbx.files.remove(`${dir}/never-existed`);
    assert.deepEqual(await sbx.files.list(dir), []);
  });

  it("rename moves a file and returns its new info", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/old.txt`, "content");
    const info = await sbx.files.rename(`${dir}/old.txt`, `${dir}/new.txt`);
    assert.deepEqual(
      [info.name, info.type, info.path, info.size],
      ["new.txt", "file", `${dir}/new.txt`, 7],
    );
    assert.equal(await sbx.files.exists(`${dir}/old.txt`), false);
    assert.equal(await sbx.files.read(`${dir}/new.txt`), "content");
    const moved = await sbx.files.rename(`${dir}/new.txt`, `${dir}/made/for/it.txt`);
    assert.equal(moved.path, `${dir}/made/for/it.txt`);
    assert.equal((await sbx.files.getInfo(`${dir}/made/for`)).owner, "user");
  });

  it("rename of a missing source throws FileNotFoundError", async (t) => {
    const dir = await userWorkdir(t);
    const rename = sbx.files.rename(`${dir}/missing.txt`, `${dir}/other.txt`);
    await assert.rejects(rename, FileNotFoundError);
  });
});
