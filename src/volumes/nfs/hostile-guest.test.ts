// The volume NFS server against a hostile guest (root in its VM sends whatever it likes), on
// loopback with real files: memory it cannot grow (empty record fragments, pipelined READs it
// never reads), forged handles that cannot make it walk the tree over and over, a full disk
// it cannot fill past the reserve, and no root-owned or set-uid file it can plant for another
// sandbox to run.
import assert from "node:assert/strict";
import {
  chmodSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  forgedHandle,
  heldBytes,
  MiB,
  Nfs,
  RpcClient,
  sleep,
} from "../../../test/unit/volumes/nfs-client.js";
import { DiskReserve } from "../disk-reserve.js";
import { type NfsServer, startNfsServer } from "./nfs-server.js";
import { XdrWriter } from "./xdr.js";

const isRoot = process.getuid?.() === 0;
/** What one guest may make the server hold, at most. */
const MEMORY_BOUND = 64 * MiB;

describe("volume NFS server against a hostile guest", () => {
  const base = mkdtempSync(join(tmpdir(), "warren-nfs-hostile-"));
  const root = join(base, "volume");
  let server: NfsServer;

  before(async () => {
    mkdirSync(root);
    chmodSync(root, 0o777);
    writeFileSync(join(root, "big"), Buffer.alloc(MiB, 7));
    server = await startNfsServer({
      volumes: [{ key: "vol", root }],
      listen: { host: "127.0.0.1", port: 0 },
      stallMs: 1_000,
    });
  });

  after(async () => {
    await server?.close();
    rmSync(base, { recursive: true, force: true });
  });

  it("closes a connection streaming empty record fragments, holding < 64 MiB meanwhile", async () => {
    const start = heldBytes();
    const hostile = await RpcClient.open(server.port);
    // Zeros: record marks of length 0 with the last-fragment bit clear, 16 384 per chunk.
    const chunk = Buffer.alloc(64 * 1024);
    let sent = 0;
    let peak = 0;
    while (sent < 48 * MiB && !hostile.isClosed) {
      await hostile.send(chunk);
      sent += chunk.length;
      if (sent % MiB === 0) {
        await sleep(1); // the server reads what was sent
        peak = Math.max(peak, heldBytes() - start);
        if (peak > MEMORY_BOUND) break;
      }
    }
    await Promise.race([hostile.closed, sleep(5_000)]);
    const closed = hostile.isClosed;
    hostile.destroy();
    assert.ok(peak < MEMORY_BOUND, `held ${(peak / MiB).toFixed(1)} MiB more after ${sent} bytes`);
    assert.ok(closed, `the connection is closed (after ${sent} bytes of empty fragments)`);
    process.stderr.write(
      `empty fragments: closed after ${sent} bytes sent, peak growth ${(peak / MiB).toFixed(1)} MiB\n`,
    );
    await assertServes(server);
  });

  it("closes a peer pipelining 4 096 1 MiB READs it never reads, holding < 64 MiB meanwhile", async () => {
    const reader = await RpcClient.open(server.port);
    const file = await Nfs.lookup(reader, await reader.mount("/vol"), "big");
    reader.destroy();
    const start = heldBytes();
    const hostile = await RpcClient.open(server.port);
    hostile.socket.pause(); // never reads a reply
    const calls = Array.from(
      { length: 4096 },
      () => hostile.encode(100003, 3, 6, Nfs.readArgs(file.handle as Buffer, 0, MiB)).bytes,
    );
    await hostile.send(Buffer.concat(calls));
    let peak = 0;
    const began = Date.now();
    while (server.connections > 0 && Date.now() - began < 20_000) {
      await sleep(100);
      peak = Math.max(peak, heldBytes() - start);
      if (peak > MEMORY_BOUND) break;
    }
    const open = server.connections;
    hostile.destroy();
    assert.ok(peak < MEMORY_BOUND, `held ${(peak / MiB).toFixed(1)} MiB more`);
    assert.equal(open, 0, "the server closed the connection that never read");
    process.stderr.write(
      `unread READs: closed after ${Date.now() - began} ms, peak growth ${(peak / MiB).toFixed(1)} MiB\n`,
    );
    await assertServes(server);
  });

  describe("forged and unknown handles", () => {
    const tree = join(base, "tree");
    let realHandle: Buffer;
    let rootHandle: Buffer;

    before(async () => {
      mkdirSync(tree);
      for (let d = 0; d < 10; d++) {
        mkdirSync(join(tree, `d${d}`));
        for (let f = 0; f < 50; f++) writeFileSync(join(tree, `d${d}`, `f${f}`), `${d}/${f}`);
      }
      // The handle a guest got from the server before a restart (a resume, a fork).
      const first = await startNfsServer({
        volumes: [{ key: "tree", root: tree }],
        listen: { host: "127.0.0.1", port: 0 },
      });
      const client = await RpcClient.open(first.port);
      rootHandle = await client.mount("/tree");
      const dir = await Nfs.lookup(client, rootHandle, "d7");
      realHandle = (await Nfs.lookup(client, dir.handle as Buffer, "f42")).handle as Buffer;
      client.destroy();
      await first.close();
    });

    /** 1 000 GETATTRs of inodes no file has, pipelined over four connections. */
    async function unknownGetattrs(port: number): Promise<number[]> {
      const clients = await Promise.all([0, 1, 2, 3].map(() => RpcClient.open(port)));
      const statuses = await Promise.all(
        Array.from({ length: 1000 }, (_, i) =>
          Nfs.getattr(
            clients[i % 4] as RpcClient,
            forgedHandle(rootHandle, 0x7fff_0000_0000n + BigInt(i)),
          ),
        ),
      );
      for (const client of clients) client.destroy();
      return statuses.map((s) => s.status);
    }

    it("1 000 GETATTRs of unknown inodes walk the tree once; a real handle still resolves", async () => {
      const restarted = await startNfsServer({
        volumes: [{ key: "tree", root: tree }],
        listen: { host: "127.0.0.1", port: 0 },
      });
      try {
        const statuses = await unknownGetattrs(restarted.port);
        assert.deepEqual(new Set(statuses), new Set([70]), "every one STALE");
        assert.ok(restarted.work.treeWalks <= 1, `${restarted.work.treeWalks} walks`);
        const client = await RpcClient.open(restarted.port);
        const real = await Nfs.getattr(client, realHandle);
        client.destroy();
        assert.equal(real.status, 0, "the file's handle from before the restart");
        assert.equal(real.attributes?.size, 4n, "7/42");
        assert.ok(restarted.work.treeWalks <= 1, `${restarted.work.treeWalks} walks in all`);
        process.stderr.write(
          `unknown inodes: ${restarted.work.treeWalks} walk(s), ${restarted.work.entriesWalked} entries visited\n`,
        );
      } finally {
        await restarted.close();
      }
    });

    it("a real handle first, then 1 000 unknown ones: still one walk", async () => {
      const restarted = await startNfsServer({
        volumes: [{ key: "tree", root: tree }],
        listen: { host: "127.0.0.1", port: 0 },
      });
      try {
        const client = await RpcClient.open(restarted.port);
        assert.equal((await Nfs.getattr(client, realHandle)).status, 0);
        client.destroy();
        const statuses = await unknownGetattrs(restarted.port);
        assert.deepEqual(new Set(statuses), new Set([70]));
        assert.equal(restarted.work.treeWalks, 1);
      } finally {
        await restarted.close();
      }
    });
  });

  describe("a disk near its reserve", () => {
    let free = 4096 * MiB;
    let limited: NfsServer;
    let client: RpcClient;
    let rootHandle: Buffer;
    const reserved = join(base, "reserved");

    before(async () => {
      mkdirSync(reserved);
      limited = await startNfsServer({
        volumes: [{ key: "r", root: reserved }],
        listen: { host: "127.0.0.1", port: 0 },
        disk: new DiskReserve({ dir: reserved, reserveMiB: 1024, freeBytes: () => free }),
      });
      client = await RpcClient.open(limited.port);
      rootHandle = await client.mount("/r");
    });

    after(async () => {
      client?.destroy();
      await limited?.close();
    });

    it("refuses WRITE, CREATE, MKDIR, SYMLINK below the reserve with NOSPC; reads and removes go on", async () => {
      const file = await Nfs.create(client, rootHandle, "f");
      assert.equal(file.status, 0);
      assert.equal(await Nfs.write(client, file.handle as Buffer, 0, Buffer.from("before")), 0);
      free = 1024 * MiB + 100; // 100 bytes above the reserve
      assert.equal(await Nfs.write(client, file.handle as Buffer, 0, Buffer.alloc(1000)), 28);
      assert.equal((await Nfs.create(client, rootHandle, "g")).status, 28, "CREATE");
      assert.equal((await Nfs.mkdir(client, rootHandle, "d")).status, 28, "MKDIR");
      assert.equal((await Nfs.symlink(client, rootHandle, "l", "f")).status, 28, "SYMLINK");
      const read = await Nfs.read(client, file.handle as Buffer, 0, 100);
      assert.equal(read.data?.toString(), "before");
      assert.equal(await Nfs.remove(client, rootHandle, "f"), 0, "removing makes room");
      free = 2048 * MiB;
      assert.equal((await Nfs.create(client, rootHandle, "g")).status, 0, "room again");
    });

    it("tells the guest's df the space above the reserve (FSSTAT)", async () => {
      free = 1536 * MiB;
      const r = await client.nfs(18, new XdrWriter().opaque(rootHandle));
      assert.equal(r.u32(), 0);
      if (r.bool()) for (let i = 0; i < 21; i++) r.u32();
      r.u64(); // tbytes
      assert.equal(r.u64(), BigInt(512 * MiB), "fbytes");
      assert.equal(r.u64(), BigInt(512 * MiB), "abytes");
    });
  });

  describe("root squash and set-uid bits", { skip: !isRoot && "needs root (chown)" }, () => {
    const shared = join(base, "shared");
    let squashing: NfsServer;
    let client: RpcClient;
    let top: Buffer;
    const ROOT = { uid: 0, gid: 0 };
    const owner = (name: string) => {
      const stats = lstatSync(join(shared, name));
      return `${stats.uid}:${stats.gid}`;
    };
    const mode = (name: string) => statSync(join(shared, name)).mode & 0o7777;

    before(async () => {
      mkdirSync(shared);
      chmodSync(shared, 0o777);
      squashing = await startNfsServer({
        volumes: [{ key: "s", root: shared }],
        listen: { host: "127.0.0.1", port: 0 },
      });
      client = await RpcClient.open(squashing.port);
      top = await client.mount("/s");
    });

    after(async () => {
      client?.destroy();
      await squashing?.close();
    });

    it("what the guest's root makes is the anonymous id's, never root's", async () => {
      assert.equal((await Nfs.create(client, top, "by-root", { who: ROOT })).status, 0);
      assert.equal(owner("by-root"), "65534:65534");
      assert.equal((await Nfs.mkdir(client, top, "dir-by-root", { who: ROOT })).status, 0);
      assert.equal(owner("dir-by-root"), "65534:65534");
      assert.equal(
        (await Nfs.create(client, top, "gid0", { who: { uid: 1000, gid: 0 } })).status,
        0,
      );
      assert.equal(owner("gid0"), "1000:65534", "gid 0 alone is squashed too");
      // A chown to root is squashed as well; to another id it is carried out.
      const file = await Nfs.create(client, top, "by-user");
      const squashed = await Nfs.setattr(client, file.handle as Buffer, { uid: 0, gid: 0 }, ROOT);
      assert.equal(squashed.status, 0);
      assert.equal(owner("by-user"), "65534:65534");
      assert.equal(squashed.attributes?.uid, 65534, "the reply says what was stored");
      await Nfs.setattr(client, file.handle as Buffer, { uid: 1000, gid: 1000 }, ROOT);
      assert.equal(owner("by-user"), "1000:1000");
    });

    it("never stores set-uid or set-gid bits, and never shows one planted on the host", async () => {
      const file = await Nfs.create(client, top, "tool", { who: ROOT, mode: 0o6755 });
      assert.equal(file.status, 0);
      assert.equal(mode("tool"), 0o755, "CREATE");
      const set = await Nfs.setattr(client, file.handle as Buffer, { mode: 0o4755 }, ROOT);
      assert.equal(mode("tool"), 0o755, "SETATTR");
      assert.equal(set.attributes?.mode, 0o755);
      assert.equal((await Nfs.mkdir(client, top, "group", { mode: 0o3775 })).status, 0);
      assert.equal(mode("group"), 0o1775, "MKDIR: set-gid gone, sticky kept");
      // Planted on the host (a volume from before this server): stored, but never shown.
      writeFileSync(join(shared, "planted"), "#!/bin/sh\n");
      chmodSync(join(shared, "planted"), 0o4755);
      const planted = await Nfs.lookup(client, top, "planted");
      assert.equal(planted.attributes?.mode, 0o755);
      assert.equal((await Nfs.getattr(client, planted.handle as Buffer)).attributes?.mode, 0o755);
      // A set-gid directory planted on the host: what is made in it does not inherit the bit.
      mkdirSync(join(shared, "sgid"));
      chmodSync(join(shared, "sgid"), 0o2777);
      const sgid = await Nfs.lookup(client, top, "sgid");
      assert.equal((await Nfs.mkdir(client, sgid.handle as Buffer, "inner")).status, 0);
      assert.equal(mode("sgid/inner") & 0o6000, 0, "no inherited set-gid");
    });
  });
});

/** The server still answers a valid call on a new connection. */
async function assertServes(server: NfsServer): Promise<void> {
  const client = await RpcClient.open(server.port);
  try {
    const root = await client.mount("/vol");
    assert.equal((await Nfs.getattr(client, root)).status, 0);
  } finally {
    client.destroy();
  }
}
