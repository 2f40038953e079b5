import assert from "node:assert/strict";
import { chmod, lstat, mkdir, mkdtemp, readdir, rm, symlink, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { checkQmpSocket, ensureQmpDir, qmpSocketPath, removeQmpSockets } from "./qmp-dir.js";

describe("the QMP directory", () => {
  const roots: string[] = [];
  const scratch = async () => {
    const root = await mkdtemp(join(tmpdir(), "warren-qmp-"));
    roots.push(root);
    return root;
  };
  after(() => Promise.all(roots.map((root) => rm(root, { recursive: true, force: true }))));

  it("is made private (0700), and made private again if it was opened up", async () => {
    const dir = join(await scratch(), "qmp");
    await ensureQmpDir(dir);
    assert.equal((await lstat(dir)).mode & 0o777, 0o700);
    await chmod(dir, 0o755);
    await ensureQmpDir(dir);
    assert.equal((await lstat(dir)).mode & 0o777, 0o700);
  });

  it("is refused when it is a link or not a directory", async () => {
    const root = await scratch();
    await mkdir(join(root, "elsewhere"));
    await symlink(join(root, "elsewhere"), join(root, "link"));
    await assert.rejects(ensureQmpDir(join(root, "link")), /is not a directory of uid/);
    await writeFile(join(root, "file"), "");
    await assert.rejects(ensureQmpDir(join(root, "file")), /EEXIST|not a directory/);
  });

  it("names a socket per VM id, refusing ids that are paths and paths sun_path cannot hold", () => {
    assert.equal(qmpSocketPath("/var/lib/warren/qmp", "abc123"), "/var/lib/warren/qmp/abc123.sock");
    for (const id of ["../x", ".qmp", "a/b", ""])
      assert.throws(() => qmpSocketPath("/q", id), /cannot name a QMP socket/);
    assert.throws(() => qmpSocketPath(`/${"d".repeat(100)}`, "vm"), /longer than 107 bytes/);
  });

  it("takes only a socket to connect to, never a file or a link in its place", async () => {
    const dir = await scratch();
    const path = qmpSocketPath(dir, "vm");
    await writeFile(path, "");
    await assert.rejects(checkQmpSocket(path, "vm"), /is not a socket/);
    await rm(path);
    await symlink("/dev/null", path);
    await assert.rejects(checkQmpSocket(path, "vm"), /is not a socket/);
    await rm(path);
    await assert.rejects(checkQmpSocket(path, "vm"), /ENOENT/);
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(path, resolve));
    try {
      await checkQmpSocket(path, "vm");
    } finally {
      server.close();
    }
  });

  it("drops every socket left in it, and nothing else", async () => {
    const dir = await scratch();
    await writeFile(join(dir, "a.sock"), "");
    await writeFile(join(dir, "b.sock"), "");
    await writeFile(join(dir, "notes.txt"), "");
    assert.equal(await removeQmpSockets(dir), 2);
    assert.deepEqual(await readdir(dir), ["notes.txt"]);
    assert.equal(await removeQmpSockets(join(dir, "missing")), 0);
  });
});
