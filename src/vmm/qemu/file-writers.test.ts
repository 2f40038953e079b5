import assert from "node:assert/strict";
import { mkdtemp, open, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { SnapshotTamperedError } from "../errors.js";
import { awaitNoWriters } from "./file-writers.js";

describe("awaitNoWriters (the kernel's count of a file's writers)", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "warren-writers-"));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it("goes ahead when no one writes the file, and refuses while a descriptor could", async () => {
    const path = join(dir, "disk.qcow2");
    await writeFile(path, "layer");
    const reader = await open(path, "r");
    try {
      await awaitNoWriters(reader, path, 0);
      const writer = await open(path, "r+");
      await assert.rejects(awaitNoWriters(reader, path, 100), (err: unknown) => {
        assert.ok(err instanceof SnapshotTamperedError);
        assert.match(err.message, /disk\.qcow2 is open for writing by another process/);
        return true;
      });
      // A writer that lets go while it waits: it goes ahead then.
      const waiting = awaitNoWriters(reader, path, 5_000);
      setTimeout(() => void writer.close(), 100);
      await waiting;
    } finally {
      await reader.close();
    }
  });
});
