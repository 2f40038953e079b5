/**
 * A guest's side of the volume NFS server's wire, for tests: ONC RPC records over one TCP
 * connection, calls pipelined and matched by xid, raw bytes for hostile peers, and encoders
 * for the NFSv3 calls the tests make (RFC 1813). Also the process's memory as the tests
 * measure it (heap + external, after a gc).
 */
import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { MOUNT_PROGRAM, NFS_PROGRAM } from "../../../src/volumes/nfs/nfs3.js";
import { XdrReader, XdrWriter } from "../../../src/volumes/nfs/xdr.js";

export interface Who {
  readonly uid: number;
  readonly gid: number;
}

/** A reply record, read up to its accept status. */
export interface RpcReply {
  readonly xid: number;
  /** MSG_ACCEPTED (0) or MSG_DENIED (1). */
  readonly replyStat: number;
  /** The accept status (SUCCESS 0, …) when accepted. */
  readonly acceptStat: number | undefined;
  readonly body: XdrReader;
}

/** One RPC connection; calls may be pipelined (each answered by its xid). */
export class RpcClient {
  #xid = 1;
  #chunks: Buffer[] = [];
  #buffered = 0;
  readonly #waiting = new Map<number, (reply: RpcReply) => void>();
  /** Replies that matched no waiting call (raw sends). */
  readonly unmatched: RpcReply[] = [];
  readonly closed: Promise<void>;
  #isClosed = false;

  constructor(readonly socket: Socket) {
    socket.on("error", () => {});
    socket.on("data", (chunk: Buffer) => this.#receive(chunk));
    this.closed = new Promise((resolve) =>
      socket.once("close", () => {
        this.#isClosed = true;
        resolve();
      }),
    );
  }

  static async open(port: number): Promise<RpcClient> {
    const socket = connect(port, "127.0.0.1");
    await new Promise((resolve, reject) => socket.once("connect", resolve).once("error", reject));
    return new RpcClient(socket);
  }

  get isClosed(): boolean {
    return this.#isClosed;
  }

  /** The bytes of a call record (mark included) as a client sends it. */
  encode(
    program: number,
    version: number,
    procedure: number,
    args: XdrWriter | Buffer,
    who: Who = { uid: 1000, gid: 1000 },
    xid = this.#xid++,
  ): { xid: number; bytes: Buffer } {
    const credentials = new XdrWriter().u32(0).string("guest").u32(who.uid).u32(who.gid).u32(0);
    const call = new XdrWriter()
      .u32(xid)
      .u32(0) // CALL
      .u32(2) // RPC version
      .u32(program)
      .u32(version)
      .u32(procedure)
      .u32(1) // AUTH_UNIX
      .opaque(credentials.toBuffer())
      .u32(0)
      .u32(0);
    const body = Buffer.concat([
      call.toBuffer(),
      args instanceof XdrWriter ? args.toBuffer() : args,
    ]);
    return { xid, bytes: withMark(body) };
  }

  /** Sends a call and waits for its reply (undefined: the connection closed first). */
  async request(
    program: number,
    version: number,
    procedure: number,
    args: XdrWriter | Buffer,
    who?: Who,
  ): Promise<RpcReply | undefined> {
    const { xid, bytes } = this.encode(program, version, procedure, args, who);
    const reply = new Promise<RpcReply | undefined>((resolve) => {
      this.#waiting.set(xid, resolve);
      void this.closed.then(() => resolve(undefined));
    });
    this.socket.write(bytes);
    return reply;
  }

  /** A call that must succeed at the RPC level: the result body after the accept status. */
  async call(program: number, procedure: number, args: XdrWriter, who?: Who): Promise<XdrReader> {
    const reply = await this.request(program, 3, procedure, args, who);
    assert.ok(reply, "the server answered before closing");
    assert.equal(reply.replyStat, 0, "accepted");
    assert.equal(reply.acceptStat, 0, "SUCCESS");
    return reply.body;
  }

  nfs(procedure: number, args: XdrWriter, who?: Who): Promise<XdrReader> {
    return this.call(NFS_PROGRAM, procedure, args, who);
  }

  /** MOUNT's MNT of an export: its root handle. */
  async mount(path: string): Promise<Buffer> {
    const r = await this.call(MOUNT_PROGRAM, 1, new XdrWriter().string(path));
    assert.equal(r.u32(), 0, "MNT3_OK");
    return r.opaque(64);
  }

  /** Raw bytes, as a hostile peer writes them; resolves once the socket took them. */
  send(bytes: Buffer): Promise<void> {
    return new Promise((resolve) => {
      if (this.socket.destroyed) return resolve();
      if (this.socket.write(bytes)) return resolve();
      const done = () => {
        this.socket.off("drain", done);
        this.socket.off("close", done);
        resolve();
      };
      this.socket.on("drain", done).on("close", done);
    });
  }

  destroy(): void {
    this.socket.destroy();
  }

  #receive(chunk: Buffer): void {
    this.#chunks.push(chunk);
    this.#buffered += chunk.length;
    for (;;) {
      if (this.#buffered < 4) return;
      const head = Buffer.concat(this.#chunks, this.#buffered);
      const length = head.readUInt32BE(0) & 0x7fffffff;
      if (head.length < 4 + length) {
        this.#chunks = [head];
        return;
      }
      const record = head.subarray(4, 4 + length);
      const rest = head.subarray(4 + length);
      this.#chunks = rest.length > 0 ? [rest] : [];
      this.#buffered = rest.length;
      this.#deliver(record);
    }
  }

  #deliver(record: Buffer): void {
    const r = new XdrReader(record);
    const xid = r.u32();
    r.u32(); // REPLY
    const replyStat = r.u32();
    let acceptStat: number | undefined;
    if (replyStat === 0) {
      r.u32();
      r.opaque(400); // verifier
      acceptStat = r.u32();
    }
    const reply = { xid, replyStat, acceptStat, body: r };
    const waiting = this.#waiting.get(xid);
    this.#waiting.delete(xid);
    if (waiting) waiting(reply);
    else this.unmatched.push(reply);
  }
}

export function withMark(record: Buffer, last = true): Buffer {
  const mark = Buffer.allocUnsafe(4);
  mark.writeUInt32BE(((last ? 0x80000000 : 0) | record.length) >>> 0);
  return Buffer.concat([mark, record]);
}

// --- NFSv3 arguments and results the tests use ---------------------------------------------

export interface Attributes {
  readonly type: number;
  readonly mode: number;
  readonly uid: number;
  readonly gid: number;
  readonly size: bigint;
  readonly ino: bigint;
}

export function readAttributes(r: XdrReader): Attributes {
  const type = r.u32();
  const mode = r.u32();
  r.u32(); // nlink
  const uid = r.u32();
  const gid = r.u32();
  const size = r.u64();
  r.u64(); // used
  r.u32();
  r.u32(); // rdev
  r.u64(); // fsid
  const ino = r.u64();
  for (let i = 0; i < 6; i++) r.u32(); // times
  return { type, mode, uid, gid, size, ino };
}

/** sattr3: what to set (undefined: leave as is). */
export function setAttributes(wanted: { mode?: number; uid?: number; gid?: number } = {}) {
  const out = new XdrWriter();
  for (const value of [wanted.mode, wanted.uid, wanted.gid]) {
    if (value === undefined) out.bool(false);
    else out.bool(true).u32(value);
  }
  return out.bool(false).u32(0).u32(0); // size, atime, mtime: unchanged
}

/** An NFS status and, when OK, what followed it. */
export interface Made {
  readonly status: number;
  readonly handle?: Buffer;
  readonly attributes?: Attributes;
}

export const Nfs = {
  async getattr(client: RpcClient, handle: Buffer): Promise<Made> {
    const r = await client.nfs(1, new XdrWriter().opaque(handle));
    const status = r.u32();
    return status === 0 ? { status, attributes: readAttributes(r) } : { status };
  },

  async lookup(client: RpcClient, dir: Buffer, name: string): Promise<Made> {
    const r = await client.nfs(3, new XdrWriter().opaque(dir).string(name));
    const status = r.u32();
    if (status !== 0) return { status };
    const handle = r.opaque(64);
    r.bool();
    return { status, handle, attributes: readAttributes(r) };
  },

  async create(
    client: RpcClient,
    dir: Buffer,
    name: string,
    options: { who?: Who; mode?: number; uid?: number; gid?: number } = {},
  ): Promise<Made> {
    const args = new XdrWriter()
      .opaque(dir)
      .string(name)
      .u32(1) // GUARDED
      .append(setAttributes(options));
    return made(await client.nfs(8, args, options.who));
  },

  async mkdir(
    client: RpcClient,
    dir: Buffer,
    name: string,
    options: { who?: Who; mode?: number } = {},
  ): Promise<Made> {
    const args = new XdrWriter().opaque(dir).string(name).append(setAttributes(options));
    return made(await client.nfs(9, args, options.who));
  },

  async symlink(client: RpcClient, dir: Buffer, name: string, target: string): Promise<Made> {
    const args = new XdrWriter().opaque(dir).string(name).append(setAttributes()).string(target);
    return made(await client.nfs(10, args));
  },

  async setattr(
    client: RpcClient,
    handle: Buffer,
    wanted: { mode?: number; uid?: number; gid?: number },
    who?: Who,
  ): Promise<Made> {
    const args = new XdrWriter().opaque(handle).append(setAttributes(wanted)).bool(false);
    const r = await client.nfs(2, args, who);
    const status = r.u32();
    if (status !== 0) return { status };
    r.bool(); // no pre-op attributes
    if (!r.bool()) return { status };
    return { status, attributes: readAttributes(r) };
  },

  async write(client: RpcClient, file: Buffer, offset: number, data: Buffer): Promise<number> {
    const args = new XdrWriter().opaque(file).u64(offset).u32(data.length).u32(2).opaque(data);
    return (await client.nfs(7, args)).u32();
  },

  readArgs(file: Buffer, offset: number, count: number): XdrWriter {
    return new XdrWriter().opaque(file).u64(offset).u32(count);
  },

  async read(client: RpcClient, file: Buffer, offset: number, count: number) {
    const r = await client.nfs(6, Nfs.readArgs(file, offset, count));
    const status = r.u32();
    if (status !== 0) return { status };
    r.bool();
    readAttributes(r);
    r.u32();
    const eof = r.bool();
    return { status, eof, data: r.opaque(1 << 21) };
  },

  async remove(client: RpcClient, dir: Buffer, name: string): Promise<number> {
    return (await client.nfs(12, new XdrWriter().opaque(dir).string(name))).u32();
  },

  /** One READDIR(PLUS) page. */
  async readdirPage(
    client: RpcClient,
    dir: Buffer,
    options: { plus: boolean; cookie: bigint; verifier: Buffer; count: number },
  ) {
    const args = new XdrWriter().opaque(dir).u64(options.cookie).fixed(options.verifier);
    if (options.plus) args.u32(options.count).u32(options.count);
    else args.u32(options.count);
    const r = await client.nfs(options.plus ? 17 : 16, args);
    const status = r.u32();
    if (status !== 0) return { status, entries: [], eof: false, verifier: options.verifier };
    if (r.bool()) readAttributes(r);
    const verifier = Buffer.from(r.fixed(8));
    const entries: { name: string; cookie: bigint; ino: bigint }[] = [];
    while (r.bool()) {
      const ino = r.u64();
      const name = r.string(255);
      const cookie = r.u64();
      if (options.plus) {
        if (r.bool()) readAttributes(r);
        if (r.bool()) r.opaque(64);
      }
      entries.push({ name, cookie, ino });
    }
    return { status, entries, eof: r.bool(), verifier };
  },

  /** A whole directory, page by page as a client lists it: names in order, pages taken. */
  async list(client: RpcClient, dir: Buffer, options: { plus: boolean; count: number }) {
    const names: string[] = [];
    let cookie = 0n;
    let verifier: Buffer = Buffer.alloc(8);
    for (let pages = 1; ; pages++) {
      const page = await Nfs.readdirPage(client, dir, { ...options, cookie, verifier });
      assert.equal(page.status, 0, `page ${pages}`);
      names.push(...page.entries.map((e) => e.name));
      if (page.eof) return { names, pages };
      assert.ok(page.entries.length > 0, "a page that is not the last lists something");
      cookie = page.entries.at(-1)?.cookie ?? cookie;
      verifier = page.verifier;
    }
  },
};

function made(r: XdrReader): Made {
  const status = r.u32();
  if (status !== 0) return { status };
  r.bool();
  const handle = r.opaque(64);
  r.bool();
  return { status, handle, attributes: readAttributes(r) };
}

/** A handle of the volume whose root handle is `root`, naming another inode. */
export function forgedHandle(root: Buffer, ino: bigint): Buffer {
  const handle = Buffer.from(root);
  handle.writeBigUInt64BE(ino, 8);
  return handle;
}

// --- memory ----------------------------------------------------------------------------------

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

/**
 * What this process holds in JavaScript objects and buffers, in bytes: V8's heap in use plus
 * memory outside it (`external`, which already counts `arrayBuffers`: Buffers), after a gc.
 */
export function heldBytes(collect = true): number {
  if (collect) gc();
  const usage = process.memoryUsage();
  return usage.heapUsed + usage.external;
}

export const MiB = 1024 * 1024;

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
