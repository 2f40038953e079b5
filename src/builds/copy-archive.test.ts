import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { after, it } from "node:test";
import { create, list } from "tar";
import { linkSafeArchive } from "./copy-archive.js";

const dir = await mkdtemp(join(tmpdir(), "warren-copy-archive-"));
after(() => rm(dir, { recursive: true, force: true }));
await mkdir(join(dir, "app", "sub"), { recursive: true });
await writeFile(join(dir, "app", "hello.txt"), "hi\n");
await writeFile(join(dir, "app", "sub", "nested.txt"), "n\n");
await symlink("hello.txt", join(dir, "app", "link"));
await symlink("sub", join(dir, "app", "dirlink"));
/** What the SDK lists for `copy("app", ...)`: the link to a directory and what it sees through it. */
const ENTRIES = [
  "app/hello.txt",
  "app/dirlink",
  "app/dirlink/nested.txt",
  "app/link",
  "app/sub",
  "app/sub/nested.txt",
];

/** The link-safe archive of `file`, streamed out to a file of its own. */
async function linkSafe(file: string): Promise<string> {
  const out = join(dir, "out.tar");
  await pipeline(await linkSafeArchive(() => createReadStream(file)), createWriteStream(out));
  return out;
}

async function entries(file: string): Promise<string[]> {
  const seen: string[] = [];
  await list({
    file,
    onReadEntry: (e) => seen.push(`${e.type} ${e.path}${e.linkpath ? ` -> ${e.linkpath}` : ""}`),
  });
  return seen;
}

it("drops what an archive lists below its own symlinks, keeping links and files", async () => {
  const file = join(dir, "sdk.tgz");
  await create({ gzip: true, cwd: dir, noDirRecurse: true, file }, ENTRIES);
  assert.deepEqual(await entries(await linkSafe(file)), [
    "File app/hello.txt",
    "SymbolicLink app/dirlink -> sub",
    "SymbolicLink app/link -> hello.txt",
    "Directory app/sub/",
    "File app/sub/nested.txt",
  ]);
});

it("keeps a file GNU tar stored through a link at its real path, not as a hard link to itself", async () => {
  const file = join(dir, "gnu.tar");
  execFileSync("tar", ["--no-recursion", "-C", dir, "-cf", file, ...ENTRIES]);
  const out = await entries(await linkSafe(file));
  assert.ok(
    out.includes("Link app/sub/nested.txt -> app/sub/nested.txt") === false,
    out.join("\n"),
  );
  assert.ok(!out.some((e) => e.includes("app/dirlink/nested.txt")), out.join("\n"));
  assert.ok(
    out.some((e) => e.endsWith("app/sub/nested.txt")),
    out.join("\n"),
  );
});

it("refuses what is not a tar archive", async () => {
  const file = join(dir, "text.tar");
  await writeFile(file, "not a tar at all, just text".repeat(40));
  await assert.rejects(linkSafe(file), /not a tar archive/);
});
