// READDIR and READDIRPLUS of a large directory in small pages, as a guest's `ls` lists it:
// the whole listing costs one read of the directory and one stat per entry (counted by the
// server, not timed), every name comes once and in order, and a new listing sees new names.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Nfs, RpcClient } from "../../../test/unit/volumes/nfs-client.js";
import { type NfsServer, startNfsServer } from "./nfs-server.js";

const ENTRIES = 3000;

describe("volume NFS server: listing a large directory", () => {
  const base = mkdtempSync(join(tmpdir(), "warren-nfs-readdir-"));
  const root = join(base, "volume");
  const expected = Array.from({ length: ENTRIES }, (_, i) => `file-${String(i).padStart(5, "0")}`);
  let server: NfsServer;
  let client: RpcClient;
  let dir: Buffer;

  before(async () => {
    mkdirSync(join(root, "big"), { recursive: true });
    for (const name of expected) writeFileSync(join(root, "big", name), "");
    server = await startNfsServer({
      volumes: [{ key: "vol", root }],
      listen: { host: "127.0.0.1", port: 0 },
    });
    client = await RpcClient.open(server.port);
    dir = (await Nfs.lookup(client, await client.mount("/vol"), "big")).handle as Buffer;
  });

  after(async () => {
    client?.destroy();
    await server?.close();
    rmSync(base, { recursive: true, force: true });
  });

  for (const plus of [true, false]) {
    it(`${plus ? "READDIRPLUS" : "READDIR"} in pages costs one read and one stat per entry`, async () => {
      const before = { ...server.work };
      // 4 KiB pages: tens of entries each, ~100 pages for the whole directory.
      const { names, pages } = await Nfs.list(client, dir, { plus, count: 4096 });
      assert.deepEqual(names, expected, "every name once, in order");
      assert.ok(pages > 20, `${pages} pages`);
      const reads = server.work.directoryReads - before.directoryReads;
      const stats = server.work.entriesStatted - before.entriesStatted;
      process.stderr.write(
        `${plus ? "READDIRPLUS" : "READDIR"}: ${ENTRIES} entries in ${pages} pages: ${reads} directory read(s), ${stats} stats\n`,
      );
      assert.equal(reads, 1, "one read of the directory for the whole listing");
      assert.ok(stats <= ENTRIES + pages, `${stats} stats for ${ENTRIES} entries`);
    });
  }

  it("a new listing sees names made since; an unknown verifier still resumes", async () => {
    writeFileSync(join(root, "big", "zz-new"), "");
    const { names } = await Nfs.list(client, dir, { plus: true, count: 65536 });
    assert.equal(names.at(-1), "zz-new");
    assert.equal(names.length, ENTRIES + 1);
    // A client resuming a listing the server no longer keeps (a restart, evicted): by position.
    const page = await Nfs.readdirPage(client, dir, {
      plus: false,
      cookie: BigInt(ENTRIES),
      verifier: Buffer.from("whatever"),
      count: 4096,
    });
    assert.equal(page.status, 0);
    assert.deepEqual(
      page.entries.map((e) => e.name),
      ["zz-new"],
    );
    assert.equal(page.eof, true);
  });
});
