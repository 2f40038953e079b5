// The volume NFS server over TCP, driven by a small NFSv3 client of the test's own (the wire
// of RFC 1813; the guest kernel's client runs against it in the e2e tier): mount, create,
// write, read, attributes and ownership from AUTH_UNIX, directories, renames, links, symlinks
// stored but never followed on the host, handles that outlive the server, and a hostile
// guest's links, foreign handles and oversized records.
import assert from "node:assert/strict";
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  type Attributes,
  RpcClient,
  readAttributes,
} from "../../../test/unit/volumes/nfs-client.js";
import { type NfsServer, startNfsServer } from "./nfs-server.js";
import { MOUNT_PROGRAM } from "./nfs3.js";
import { XdrWriter } from "./xdr.js";

const isRoot = process.getuid?.() === 0;

const noAttributes = () =>
  new XdrWriter().bool(false).bool(false).bool(false).bool(false).u32(0).u32(0);

describe("volume NFS server", () => {
  const base = mkdtempSync(join(tmpdir(), "warren-nfs-"));
  const root = join(base, "volume");
  const outside = join(base, "outside");
  const other = join(base, "other");
  let server: NfsServer;
  let client: RpcClient;
  let rootHandle: Buffer;

  before(async () => {
    mkdirSync(root);
    mkdirSync(outside);
    mkdirSync(other);
    writeFileSync(join(outside, "secret"), "host secret\n");
    server = await startNfsServer({
      volumes: [
        { key: "vol-1", root },
        { key: "vol-2", root: other },
      ],
      listen: { host: "127.0.0.1", port: 0 },
    });
    client = await RpcClient.open(server.port);
    const mounted = await client.call(MOUNT_PROGRAM, 1, new XdrWriter().string("/vol-1"));
    assert.equal(mounted.u32(), 0, "MNT3_OK");
    rootHandle = mounted.opaque(64);
  });

  after(async () => {
    client?.socket.destroy();
    await server?.close();
    rmSync(base, { recursive: true, force: true });
  });

  async function lookup(
    dir: Buffer,
    name: string,
  ): Promise<{ status: number; handle?: Buffer; attributes?: Attributes }> {
    const r = await client.nfs(3, new XdrWriter().opaque(dir).string(name));
    const status = r.u32();
    if (status !== 0) return { status };
    const handle = r.opaque(64);
    r.bool();
    return { status, handle, attributes: readAttributes(r) };
  }

  async function create(dir: Buffer, name: string, who?: { uid: number; gid: number }) {
    const r = await client.nfs(
      8,
      new XdrWriter().opaque(dir).string(name).u32(1).append(noAttributes()),
      who,
    );
    const status = r.u32();
    if (status !== 0) return { status };
    r.bool();
    const handle = r.opaque(64);
    r.bool();
    return { status, handle, attributes: readAttributes(r) };
  }

  async function write(file: Buffer, offset: number, data: string) {
    const bytes = Buffer.from(data);
    const r = await client.nfs(
      7,
      new XdrWriter().opaque(file).u64(offset).u32(bytes.length).u32(2).opaque(bytes),
    );
    return r.u32();
  }

  async function read(file: Buffer, offset: number, count: number) {
    const r = await client.nfs(6, new XdrWriter().opaque(file).u64(offset).u32(count));
    const status = r.u32();
    if (status !== 0) return { status };
    r.bool();
    readAttributes(r);
    r.u32();
    const eof = r.bool();
    return { status, eof, data: r.opaque(1 << 20).toString() };
  }

  async function mkdirIn(dir: Buffer, name: string) {
    const r = await client.nfs(9, new XdrWriter().opaque(dir).string(name).append(noAttributes()));
    const status = r.u32();
    if (status !== 0) return { status };
    r.bool();
    return { status, handle: r.opaque(64) };
  }

  async function names(dir: Buffer): Promise<string[]> {
    const r = await client.nfs(
      17,
      new XdrWriter().opaque(dir).u64(0).fixed(Buffer.alloc(8)).u32(65536).u32(65536),
    );
    assert.equal(r.u32(), 0);
    r.bool();
    readAttributes(r);
    r.fixed(8);
    const found: string[] = [];
    while (r.bool()) {
      r.u64();
      found.push(r.string(255));
      r.u64();
      if (r.bool()) readAttributes(r);
      if (r.bool()) r.opaque(64);
    }
    return found;
  }

  it("creates, writes and reads a file owned by the caller", async () => {
    const made = await create(rootHandle, "hello.txt");
    assert.equal(made.status, 0);
    assert.equal(await write(made.handle as Buffer, 0, "hello "), 0);
    assert.equal(await write(made.handle as Buffer, 6, "world"), 0);
    assert.deepEqual(await read(made.handle as Buffer, 0, 100), {
      status: 0,
      eof: true,
      data: "hello world",
    });
    assert.deepEqual(await read(made.handle as Buffer, 6, 3), {
      status: 0,
      eof: false,
      data: "wor",
    });
    assert.equal(readFileSync(join(root, "hello.txt"), "utf8"), "hello world");
    if (isRoot) {
      const stats = statSync(join(root, "hello.txt"));
      assert.deepEqual([stats.uid, stats.gid], [1000, 1000], "AUTH_UNIX's uid and gid");
    }
    const found = await lookup(rootHandle, "hello.txt");
    assert.equal(found.attributes?.size, 11n);
    assert.equal(found.attributes?.type, 1);
    assert.equal((await lookup(rootHandle, "missing")).status, 2, "NOENT");
    assert.equal((await create(rootHandle, "hello.txt")).status, 17, "GUARDED: EXIST");
  });

  it("answers an EXCLUSIVE create's retransmission as done, another verifier as EXIST", async () => {
    const exclusive = (verifier: Buffer) =>
      client.nfs(8, new XdrWriter().opaque(rootHandle).string("once").u32(2).fixed(verifier));
    const first = Buffer.from("verifier");
    assert.equal((await exclusive(first)).u32(), 0);
    assert.equal((await exclusive(first)).u32(), 0, "the same call again");
    assert.equal((await exclusive(Buffer.from("another!"))).u32(), 17, "EXIST");
    const removed = await client.nfs(12, new XdrWriter().opaque(rootHandle).string("once"));
    assert.equal(removed.u32(), 0);
  });

  it("makes directories, lists them, renames across them, removes", async () => {
    const dir = await mkdirIn(rootHandle, "d");
    assert.equal(dir.status, 0);
    const file = await lookup(rootHandle, "hello.txt");
    const r = await client.nfs(
      14,
      new XdrWriter()
        .opaque(rootHandle)
        .string("hello.txt")
        .opaque(dir.handle as Buffer)
        .string("moved.txt"),
    );
    assert.equal(r.u32(), 0);
    assert.deepEqual(await names(dir.handle as Buffer), ["moved.txt"]);
    // The old handle still names the file where it went.
    assert.equal((await read(file.handle as Buffer, 0, 5)).data, "hello");
    assert.deepEqual((await names(rootHandle)).sort(), ["d"]);
    const removed = await client.nfs(
      12,
      new XdrWriter().opaque(dir.handle as Buffer).string("moved.txt"),
    );
    assert.equal(removed.u32(), 0);
    assert.equal((await read(file.handle as Buffer, 0, 5)).status, 70, "STALE once removed");
    const rmdir = await client.nfs(13, new XdrWriter().opaque(rootHandle).string("d"));
    assert.equal(rmdir.u32(), 0);
  });

  it("stores symlinks as text and never follows one on the host", async () => {
    const made = await client.nfs(
      10,
      new XdrWriter().opaque(rootHandle).string("etc").append(noAttributes()).string("/etc"),
    );
    assert.equal(made.u32(), 0);
    const link = await lookup(rootHandle, "etc");
    assert.equal(link.attributes?.type, 5, "LNK");
    const text = await client.nfs(5, new XdrWriter().opaque(link.handle as Buffer));
    assert.equal(text.u32(), 0);
    text.bool();
    readAttributes(text);
    assert.equal(text.string(4096), "/etc");
    // A link planted to the host's directory: as a directory it is refused, never entered.
    symlinkSync(outside, join(root, "out"));
    const out = await lookup(rootHandle, "out");
    assert.equal(out.attributes?.type, 5);
    assert.notEqual((await create(out.handle as Buffer, "planted")).status, 0);
    assert.notEqual((await lookup(out.handle as Buffer, "secret")).status, 0);
    assert.notEqual((await read(out.handle as Buffer, 0, 100)).status, 0);
    assert.notEqual(await write(out.handle as Buffer, 0, "overwritten"), 0);
    assert.equal(readFileSync(join(outside, "secret"), "utf8"), "host secret\n");
    assert.deepEqual(readdirSync(outside), ["secret"], "nothing made outside");
  });

  it("exports each volume by its key, and keeps them apart", async () => {
    const second = await client.call(MOUNT_PROGRAM, 1, new XdrWriter().string("/vol-2"));
    assert.equal(second.u32(), 0);
    const otherRoot = second.opaque(64);
    assert.notDeepEqual(otherRoot, rootHandle);
    const made = await create(otherRoot, "only-in-2");
    assert.equal(made.status, 0);
    assert.equal(readdirSync(other).includes("only-in-2"), true);
    assert.equal((await lookup(rootHandle, "only-in-2")).status, 2);
    const moved = await client.nfs(
      14,
      new XdrWriter().opaque(otherRoot).string("only-in-2").opaque(rootHandle).string("x"),
    );
    assert.equal(moved.u32(), 18, "XDEV between volumes");
    const unknown = await client.call(MOUNT_PROGRAM, 1, new XdrWriter().string("/vol-3"));
    assert.equal(unknown.u32(), 2, "MNT3ERR_NOENT");
  });

  it("refuses MKNOD, '..', names with '/', and handles of another volume", async () => {
    const mknod = await client.nfs(11, new XdrWriter().opaque(rootHandle).string("dev").u32(3));
    assert.equal(mknod.u32(), 10004, "NOTSUPP");
    assert.equal((await lookup(rootHandle, "..")).status, 22, "INVAL");
    assert.equal((await lookup(rootHandle, "a/b")).status, 22);
    const foreign = Buffer.from(rootHandle);
    foreign[0] = (foreign[0] ?? 0) ^ 0xff;
    assert.equal((await lookup(foreign, "x")).status, 10001, "BADHANDLE");
  });

  it("answers a handle from before a restart: the inode is found again", async () => {
    const dir = await mkdirIn(rootHandle, "kept");
    const file = await create(dir.handle as Buffer, "file");
    assert.equal(await write(file.handle as Buffer, 0, "still here"), 0);
    const again = await startNfsServer({
      volumes: [{ key: "vol-1", root }],
      listen: { host: "127.0.0.1", port: 0 },
    });
    const fresh = await RpcClient.open(again.port);
    try {
      const previous = client;
      client = fresh;
      assert.equal((await read(file.handle as Buffer, 0, 100)).data, "still here");
      client = previous;
    } finally {
      fresh.socket.destroy();
      await again.close();
    }
  });

  it("refuses writes and new entries past the team's quota with EDQUOT, reads go on", async () => {
    const file = await create(rootHandle, "quota-file");
    assert.equal(await write(file.handle as Buffer, 0, "before"), 0);
    let room = 10;
    const limited = await startNfsServer({
      volumes: [{ key: "vol-1", root }],
      listen: { host: "127.0.0.1", port: 0 },
      admit: (bytes) => {
        if (bytes > room) return false;
        room -= bytes;
        return true;
      },
    });
    const fresh = await RpcClient.open(limited.port);
    const previous = client;
    try {
      client = fresh;
      assert.equal(await write(file.handle as Buffer, 0, "tiny"), 0, "within the quota");
      assert.equal(await write(file.handle as Buffer, 0, "more than ten"), 69, "DQUOT");
      assert.equal((await create(rootHandle, "another")).status, 69, "a new entry counts too");
      assert.equal((await read(file.handle as Buffer, 0, 100)).data, "tinyre");
    } finally {
      client = previous;
      fresh.socket.destroy();
      await limited.close();
    }
  });

  it("drops a connection that sends a record over the bound", async () => {
    const hostile = await RpcClient.open(server.port);
    const mark = Buffer.allocUnsafe(4);
    mark.writeUInt32BE((0x80000000 | (64 * 1024 * 1024)) >>> 0);
    hostile.socket.write(mark);
    await hostile.closed;
    assert.equal((await lookup(rootHandle, "kept")).status, 0, "the others go on");
  });
});
