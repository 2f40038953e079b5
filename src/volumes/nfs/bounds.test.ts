// What the NFS server remembers between calls stays bounded whatever a guest does: the
// READDIR listings it keeps (a guest starting listing after listing of a huge directory), and
// the places of inodes it has seen (a guest making file after file).
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { lstat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { Handles } from "./handles.js";
import { Listings } from "./listings.js";

describe("NFS server memory between calls", () => {
  const base = mkdtempSync(join(tmpdir(), "warren-nfs-bounds-"));
  after(() => rmSync(base, { recursive: true, force: true }));

  it("keeps one copy of a huge directory's names, not one per listing started", () => {
    const listings = new Listings();
    const huge = () => Array.from({ length: 300_000 }, (_, i) => `n${i}`);
    const first = listings.start("vol", 1n, huge());
    const second = listings.start("vol", 1n, huge());
    assert.equal(listings.resume("vol", 1n, first.verifier), undefined, "the older one went");
    assert.equal(listings.resume("vol", 1n, second.verifier), second, "the newest stays");
    assert.equal(listings.resume("vol", 2n, second.verifier), undefined, "of that directory only");
    // Small listings: sixteen kept.
    const small = Array.from({ length: 20 }, () => listings.start("vol", 3n, ["a", "b"]));
    assert.equal(
      listings.resume("vol", 3n, (small[0] as { verifier: Buffer }).verifier),
      undefined,
    );
    assert.ok(listings.resume("vol", 3n, (small[19] as { verifier: Buffer }).verifier));
  });

  it("remembers at most maxPlaces inodes, the oldest seen going first", async () => {
    const root = join(base, "places");
    mkdirSync(root);
    for (const name of ["a", "b", "c", "d"]) writeFileSync(join(root, name), name);
    const handles = await Handles.open(root, "vol", { maxPlaces: 2 });
    const ino = async (name: string) => (await lstat(join(root, name), { bigint: true })).ino;
    for (const name of ["a", "b", "c"]) handles.seen(await ino(name), handles.rootIno, name);
    handles.seen(await ino("b"), handles.rootIno, "b"); // seen again: newest now
    handles.seen(await ino("d"), handles.rootIno, "d");
    // "b" and "d" are remembered; "a" and "c" are found again only by a walk.
    assert.deepEqual(await handles.namesOf(await ino("b")), ["b"]);
    assert.deepEqual(await handles.namesOf(await ino("d")), ["d"]);
    const walked = { treeWalks: 0, entriesWalked: 0, directoryReads: 0, entriesStatted: 0 };
    const counted = await Handles.open(root, "vol", { maxPlaces: 2, work: walked });
    assert.deepEqual(await counted.namesOf(await ino("a")), undefined, "walked, then evicted");
    assert.equal(walked.treeWalks, 1);
  });
});
