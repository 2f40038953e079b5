import assert from "node:assert/strict";
import { appendFile, chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { SnapshotTamperedError } from "../errors.js";
import { SnapshotVerifier, sealSnapshot } from "./sealed-files.js";

describe("SnapshotVerifier", () => {
  let root: string;
  before(async () => {
    root = await mkdtemp(join(tmpdir(), "warren-sealed-"));
  });
  after(() => rm(root, { recursive: true, force: true }));

  /** A sealed snapshot directory (root's, read-only files) of `files`. */
  async function sealed(name: string, files: Record<string, string>): Promise<string> {
    const dir = join(root, name);
    await mkdir(dir);
    for (const [file, content] of Object.entries(files)) {
      await writeFile(join(dir, file), content);
      await chmod(join(dir, file), 0o400);
    }
    return dir;
  }

  it("trusts what its own checksum hashed: a restore right after the capture hashes nothing again", async () => {
    const dir = await sealed("own", { "memory.img": "ram", "devstate.bin": "state" });
    const verifier = new SnapshotVerifier();
    const files = await verifier.checksum(dir);
    assert.deepEqual(
      files.map((f) => [f.name, f.bytes]),
      [
        ["devstate.bin", 5],
        ["memory.img", 3],
      ],
    );
    // Records that no hash would match pass: the files were not read again.
    const unread = files.map((f) => ({ ...f, sha256: "0".repeat(64) }));
    await verifier.verify(dir, unread);
    // Another node's verifier (nothing hashed by it) reads them, and refuses.
    await assert.rejects(new SnapshotVerifier().verify(dir, unread), SnapshotTamperedError);
    await new SnapshotVerifier().verify(dir, files);
  });

  it("hashes a file again once it changed since its checksum, and refuses it", async () => {
    const dir = await sealed("changed", { "memory.img": "ram" });
    const verifier = new SnapshotVerifier();
    const files = await verifier.checksum(dir);
    await appendFile(join(dir, "memory.img"), "more"); // root may write a 0400 file
    await assert.rejects(verifier.verify(dir, files), /changed since it was captured/);
  });

  it("knows a snapshot it sealed is unchanged without hashing it; any change since, and it does not", async () => {
    const verifier = new SnapshotVerifier();
    const seal = async (name: string) => {
      const dir = await sealed(name, { "memory.img": "ram", "devstate.bin": "state" });
      verifier.sealed(dir, await sealSnapshot(dir));
      return dir;
    };
    assert.equal(await verifier.unchangedSinceSealed(await seal("kept")), true);
    assert.equal(await new SnapshotVerifier().unchangedSinceSealed(join(root, "kept")), false);

    const written = await seal("written");
    await appendFile(join(written, "memory.img"), "x");
    assert.equal(await verifier.unchangedSinceSealed(written), false);

    const added = await seal("added");
    await writeFile(join(added, "extra"), "");
    await chmod(join(added, "extra"), 0o400);
    assert.equal(await verifier.unchangedSinceSealed(added), false);

    const removed = await seal("removed");
    await rm(join(removed, "devstate.bin"));
    assert.equal(await verifier.unchangedSinceSealed(removed), false);

    const writable = await seal("writable");
    await chmod(join(writable, "memory.img"), 0o600);
    assert.equal(await verifier.unchangedSinceSealed(writable), false);
  });
});
