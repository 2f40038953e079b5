// Fuzz of the volume NFS server (fast-check) from a guest's side, on loopback against a real
// volume directory: random and mutated ONC RPC records — valid headers with garbage bodies,
// truncated records, huge and empty fragment lengths, wrong RPC versions, programs, program
// versions and procedures, odd credentials (uid 0, garbage AUTH_UNIX bodies, unknown
// flavors) — and well-formed NFSv3/MOUNT calls with nasty names, forged handles, huge offsets,
// counts and sizes, pipelined several to a connection. Properties: the server never throws
// (no uncaught exception or unhandled rejection in this process, which runs it), never
// answers SYSTEM_ERR (a handler that threw what it did not expect), holds < 64 MiB more than
// before, touches nothing outside the volume, and still answers NULL, MNT and GETATTR after;
// plus a deep directory chain, made and then searched for by a restarted server.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it, type TestContext } from "node:test";
import { type NfsServer, startNfsServer } from "../../../src/volumes/nfs/nfs-server.js";
import { MOUNT_PROGRAM, NFS_PROGRAM } from "../../../src/volumes/nfs/nfs3.js";
import { XdrWriter } from "../../../src/volumes/nfs/xdr.js";
import { fc, fuzzParameters, nastyString, reportCases } from "../../helpers/fuzz.js";
import {
  forgedHandle,
  heldBytes,
  MiB,
  Nfs,
  RpcClient,
  type RpcReply,
  sleep,
  withMark,
} from "./nfs-client.js";

const RUNS = 1000;
/** Levels of the deep directory chain (each call there opens every level from the root). */
const DEPTH = 128;
const SYSTEM_ERR = 5;

describe("volume NFS server fuzz (hostile guest)", () => {
  const base = mkdtempSync(join(tmpdir(), "warren-nfs-fuzz-"));
  const root = join(base, "volume");
  const outside = join(base, "outside");
  let server: NfsServer;
  let rootHandle: Buffer;
  let fileHandle: Buffer;
  const strays: unknown[] = [];
  const onStray = (err: unknown) => strays.push(err);

  before(async () => {
    mkdirSync(join(root, "dir", "sub"), { recursive: true });
    chmodSync(root, 0o777);
    mkdirSync(outside);
    writeFileSync(join(outside, "secret"), "host secret\n");
    writeFileSync(join(root, "file"), "some bytes\n");
    symlinkSync(outside, join(root, "out"));
    process.on("uncaughtException", onStray);
    process.on("unhandledRejection", onStray);
    server = await startNfsServer({
      volumes: [{ key: "vol", root }],
      listen: { host: "127.0.0.1", port: 0 },
      stallMs: 2_000,
    });
    const client = await RpcClient.open(server.port);
    rootHandle = await client.mount("/vol");
    fileHandle = (await Nfs.lookup(client, rootHandle, "file")).handle as Buffer;
    client.destroy();
  });

  after(async () => {
    process.off("uncaughtException", onStray);
    process.off("unhandledRejection", onStray);
    await server?.close();
    // rm(1) walks by descriptor: the chain below is deeper than PATH_MAX allows rmSync.
    execFileSync("rm", ["-rf", base]);
  });

  // --- what a guest sends ---------------------------------------------------------------

  const u32 = fc.oneof(
    fc.constantFrom(0, 1, 2, 3, 0x7fffffff, 0x80000000, 0xffffffff, 4096, 1 << 20, 1 << 24),
    fc.nat({ max: 0xffffffff }),
  );
  const u64 = fc.oneof(
    fc.constantFrom(0n, 1n, 2n ** 53n + 1n, 2n ** 63n - 1n, 2n ** 64n - 1n, 1n << 40n),
    fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
  );
  const handle = fc.oneof(
    fc.constant("root"),
    fc.constant("file"),
    fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }).map((ino) => ino),
    fc.uint8Array({ maxLength: 80 }).map((bytes) => Buffer.from(bytes)),
  );
  const name = fc.oneof(
    nastyString,
    fc.constantFrom(".", "..", "out", "file", "dir", "a/b", "", "x".repeat(256)),
  );
  interface SetAttrs {
    mode: number | null;
    uid: number | null;
    gid: number | null;
    size: bigint | null;
    atime: number;
    mtime: number;
  }
  const sattr: fc.Arbitrary<SetAttrs> = fc.record({
    mode: fc.option(u32),
    uid: fc.option(fc.oneof(fc.constant(0), u32)),
    gid: fc.option(fc.oneof(fc.constant(0), u32)),
    size: fc.option(u64),
    atime: fc.constantFrom(0, 1, 2, 3),
    mtime: fc.constantFrom(0, 1, 2, 3),
  });

  /** One argument of a call, as the test's generator names it. */
  type Arg =
    | { h: "root" | "file" | bigint | Buffer }
    | { s: string }
    | { u: number }
    | { l: bigint }
    | { o: Uint8Array }
    | { a: SetAttrs };

  const arg: fc.Arbitrary<Arg> = fc.oneof(
    handle.map((h) => ({ h })),
    name.map((s) => ({ s })),
    u32.map((u) => ({ u })),
    u64.map((l) => ({ l })),
    fc.uint8Array({ maxLength: 64 }).map((o) => ({ o })),
    sattr.map((a) => ({ a })),
  );

  const encodeArgs = (args: readonly Arg[]): Buffer => {
    const out = new XdrWriter();
    for (const a of args) {
      if ("h" in a) out.opaque(resolveHandle(a.h));
      else if ("s" in a) out.string(a.s);
      else if ("u" in a) out.u32(a.u);
      else if ("l" in a) out.u64(a.l);
      else if ("o" in a) out.opaque(Buffer.from(a.o));
      else {
        const s = a.a;
        for (const v of [s.mode, s.uid, s.gid])
          v === null ? out.bool(false) : out.bool(true).u32(v);
        s.size === null ? out.bool(false) : out.bool(true).u64(s.size);
        for (const how of [s.atime, s.mtime]) {
          out.u32(how);
          if (how === 2) out.u32(1).u32(2);
        }
      }
    }
    return out.toBuffer();
  };

  const resolveHandle = (h: "root" | "file" | bigint | Buffer): Buffer => {
    if (h === "root") return rootHandle;
    if (h === "file") return fileHandle;
    if (typeof h === "bigint") return forgedHandle(rootHandle, h);
    return h;
  };

  /** A call: program, version, procedure mostly real, credentials odd, arguments typed. */
  const call = fc.record({
    program: fc.oneof(
      { weight: 6, arbitrary: fc.constantFrom(NFS_PROGRAM, MOUNT_PROGRAM) },
      { weight: 1, arbitrary: u32 },
    ),
    version: fc.oneof({ weight: 6, arbitrary: fc.constant(3) }, { weight: 1, arbitrary: u32 }),
    procedure: fc.oneof(
      { weight: 6, arbitrary: fc.nat({ max: 22 }) },
      { weight: 1, arbitrary: u32 },
    ),
    who: fc.record({ uid: fc.oneof(fc.constant(0), u32), gid: fc.oneof(fc.constant(0), u32) }),
    args: fc.array(arg, { maxLength: 8 }),
  });

  /** How a record is then damaged, if at all. */
  const damage = fc.oneof(
    { weight: 4, arbitrary: fc.constant({ kind: "none" as const }) },
    fc.record({ kind: fc.constant("flip" as const), at: fc.nat(), byte: fc.nat({ max: 255 }) }),
    fc.record({ kind: fc.constant("truncate" as const), at: fc.nat() }),
    fc.record({ kind: fc.constant("mark" as const), length: u32 }),
    fc.record({ kind: fc.constant("split" as const), at: fc.nat() }),
    fc.record({ kind: fc.constant("rpcVersion" as const), version: u32 }),
  );

  /** A stream of bytes a guest may send on one connection. */
  const stream = fc.oneof(
    {
      weight: 6,
      arbitrary: fc
        .array(fc.tuple(call, damage), { minLength: 1, maxLength: 6 })
        .map((calls) => ({ calls })),
    },
    {
      weight: 1,
      arbitrary: fc.uint8Array({ maxLength: 2048 }).map((raw) => ({ raw: Buffer.from(raw) })),
    },
    {
      weight: 1,
      arbitrary: fc
        .array(fc.tuple(fc.nat({ max: 300 }), fc.boolean()), { maxLength: 200 })
        .map((fragments) => ({
          raw: Buffer.concat(
            fragments.map(([length, last]) => withMark(Buffer.alloc(length, 0x41), last)),
          ),
        })),
    },
  );

  type Call = typeof call extends fc.Arbitrary<infer T> ? T : never;
  type Damage = typeof damage extends fc.Arbitrary<infer T> ? T : never;

  const encodeCall = (c: Call, d: Damage, xid: number): Buffer => {
    const credentials = new XdrWriter().u32(0).string("guest").u32(c.who.uid).u32(c.who.gid).u32(0);
    const body = Buffer.concat([
      new XdrWriter()
        .u32(xid)
        .u32(0)
        .u32(d.kind === "rpcVersion" ? d.version : 2)
        .u32(c.program)
        .u32(c.version)
        .u32(c.procedure)
        .u32(1)
        .opaque(credentials.toBuffer())
        .u32(0)
        .u32(0)
        .toBuffer(),
      encodeArgs(c.args),
    ]);
    const record = withMark(body);
    switch (d.kind) {
      case "flip":
        record[d.at % record.length] = d.byte;
        return record;
      case "truncate":
        return record.subarray(0, d.at % record.length);
      case "mark":
        record.writeUInt32BE(d.length >>> 0, 0);
        return record;
      case "split": {
        // The same record as two fragments.
        const at = d.at % (body.length + 1);
        return Buffer.concat([withMark(body.subarray(0, at), false), withMark(body.subarray(at))]);
      }
      default:
        return record;
    }
  };

  /** Sends one stream on a connection of its own, half-closes, waits for the server to close. */
  async function play(bytes: Buffer): Promise<RpcReply[]> {
    const client = await RpcClient.open(server.port);
    await client.send(bytes);
    client.socket.end();
    await Promise.race([client.closed, sleep(3_000)]);
    const open = !client.isClosed;
    client.destroy();
    assert.ok(!open, "the server closes a connection its guest half-closed");
    return client.unmatched;
  }

  it("stays up, bounded, and answers valid calls after random and mutated calls", async (t: TestContext) => {
    const start = heldBytes();
    let peak = 0;
    let cases = 0;
    const statuses = new Map<string, number>();
    let xid = 1;
    await fc.assert(
      fc.asyncProperty(stream, async (s) => {
        cases++;
        const bytes =
          "raw" in s ? s.raw : Buffer.concat(s.calls.map(([c, d]) => encodeCall(c, d, xid++)));
        const replies = await play(bytes);
        for (const reply of replies) {
          const key = reply.replyStat === 0 ? `accept ${reply.acceptStat}` : "denied";
          statuses.set(key, (statuses.get(key) ?? 0) + 1);
          assert.notEqual(reply.acceptStat, SYSTEM_ERR, "no handler threw what it did not expect");
        }
        if (cases % 50 === 0) peak = Math.max(peak, heldBytes() - start);
        assert.deepEqual(strays, [], "nothing thrown outside a handler");
      }),
      fuzzParameters(t, RUNS),
    );
    peak = Math.max(peak, heldBytes() - start);
    reportCases(t, "nfs", cases, statuses);
    assert.ok(peak < 64 * MiB, `held ${(peak / MiB).toFixed(1)} MiB more`);
    assert.deepEqual(readdirSync(outside), ["secret"], "nothing made outside the volume");
    // Still serving: NULL, MNT, GETATTR.
    const client = await RpcClient.open(server.port);
    try {
      const nul = await client.request(NFS_PROGRAM, 3, 0, Buffer.alloc(0));
      assert.equal(nul?.acceptStat, 0, "NULL");
      const again = await client.mount("/vol");
      assert.equal((await Nfs.getattr(client, again)).status, 0, "GETATTR");
    } finally {
      client.destroy();
    }
    assert.deepEqual(strays, []);
  });

  it(`a directory chain ${DEPTH} deep of 200-byte names: made, then found again by a restarted server`, async () => {
    const client = await RpcClient.open(server.port);
    let dir = rootHandle;
    for (let i = 0; i < DEPTH; i++) {
      const made = await Nfs.mkdir(client, dir, `level-${i}-${"n".repeat(200)}`);
      assert.equal(made.status, 0, `level ${i}`);
      dir = made.handle as Buffer;
    }
    client.destroy();
    const restarted = await startNfsServer({
      volumes: [{ key: "vol", root }],
      listen: { host: "127.0.0.1", port: 0 },
    });
    try {
      const fresh = await RpcClient.open(restarted.port);
      const deep = await Nfs.getattr(fresh, dir);
      assert.ok([0, 70].includes(deep.status), `OK or STALE, got ${deep.status}`);
      assert.ok(restarted.work.treeWalks <= 1);
      assert.equal((await Nfs.getattr(fresh, await fresh.mount("/vol"))).status, 0);
      fresh.destroy();
    } finally {
      await restarted.close();
    }
    assert.deepEqual(strays, []);
  });
});
