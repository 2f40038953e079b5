import type { Socket } from "node:net";
import { XdrError, XdrReader, XdrWriter } from "./xdr.js";

/**
 * ONC RPC v2 (RFC 5531) over TCP, server side: records of fragments (a 4-byte mark: last
 * fragment bit, length), one call per record, answered in order per connection. A record
 * over MAX_RECORD_BYTES or MAX_FRAGMENTS, a record that is no call, or a peer that leaves its
 * replies unread ends the connection. RPC versions other than 2 are refused (RPC_MISMATCH).
 */

/** A WRITE of 1 MiB and its headers. */
export const MAX_RECORD_BYTES = 1024 * 1024 + 64 * 1024;

const CALL = 0;
const REPLY = 1;
const MSG_ACCEPTED = 0;
const MSG_DENIED = 1;
const RPC_MISMATCH = 0;
const AUTH_NONE = 0;
export const AUTH_UNIX = 1;

export const AcceptStat = {
  SUCCESS: 0,
  PROG_UNAVAIL: 1,
  PROG_MISMATCH: 2,
  PROC_UNAVAIL: 3,
  GARBAGE_ARGS: 4,
  SYSTEM_ERR: 5,
} as const;

/**
 * Who the call says it is from (AUTH_UNIX), root squashed: uid and gid 0 are the anonymous
 * id, so nothing one guest's root makes in a shared volume is root's in another guest.
 * AUTH_NONE callers are the anonymous id too.
 */
export interface Credentials {
  readonly uid: number;
  readonly gid: number;
}

/** The anonymous id (`nobody`, `nogroup`). */
export const NOBODY_ID = 65534;
const NOBODY: Credentials = { uid: NOBODY_ID, gid: NOBODY_ID };

/** A program's answer: its result body, or why there is none. */
export type ProgramReply =
  | { readonly stat: typeof AcceptStat.SUCCESS; readonly body: XdrWriter }
  | {
      readonly stat:
        | typeof AcceptStat.PROC_UNAVAIL
        | typeof AcceptStat.GARBAGE_ARGS
        | typeof AcceptStat.SYSTEM_ERR;
    };

export interface RpcProgram {
  readonly program: number;
  readonly version: number;
  call(procedure: number, args: XdrReader, credentials: Credentials): Promise<ProgramReply>;
}

export interface ConnectionLimits {
  /**
   * How long a peer may leave the replies it was sent unread (the server's unsent bytes past
   * MAX_UNSENT_BYTES and not going down) before it is dropped.
   */
  readonly stallMs: number;
}

/** Unsent reply bytes past which no further call is read or answered until the peer reads. */
export const MAX_UNSENT_BYTES = 2 * 1024 * 1024;
/** More fragments than any client puts in one record (Linux sends one). */
export const MAX_FRAGMENTS = 64;

/**
 * Serves RPC calls on one connection until it closes, one call at a time, in order. What a
 * peer can make the server hold is bounded: the record being read (MAX_RECORD_BYTES, marks
 * and fragments counted), what was read ahead of it (a record's worth, then the socket is no
 * longer read), and the replies it has not read (MAX_UNSENT_BYTES plus the one reply being
 * sent; then calls wait, and a peer that reads none of them for `stallMs` is dropped).
 */
export function serveRpc(
  socket: Socket,
  programs: readonly RpcProgram[],
  limits: ConnectionLimits,
): void {
  const records = new RecordReader();
  let ended = false;
  let wake: (() => void) | undefined;
  const poke = () => {
    const waiting = wake;
    wake = undefined;
    waiting?.();
  };
  socket.on("error", () => {});
  socket.on("close", poke);
  // The peer sent all it will: its calls are answered, then the connection is closed.
  socket.on("end", () => {
    ended = true;
    poke();
  });
  socket.on("data", (chunk: Buffer) => {
    records.push(chunk);
    // Read ahead no further than one whole record: the rest waits in the kernel.
    if (records.buffered > MAX_RECORD_BYTES) socket.pause();
    poke();
  });
  const nextRecord = async (): Promise<Buffer | undefined> => {
    for (;;) {
      if (socket.destroyed) return undefined;
      const record = records.next();
      if (record) return record;
      if (ended) return void socket.end();
      socket.resume();
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
    }
  };
  const run = async () => {
    for (;;) {
      const record = await nextRecord();
      if (!record) return;
      if (socket.writableLength > MAX_UNSENT_BYTES && !(await drained(socket, limits.stallMs))) {
        return void socket.destroy();
      }
      const reply = await answer(record, programs);
      if (!reply) return void socket.destroy();
      if (socket.destroyed) return;
      send(socket, reply);
    }
  };
  // Whatever a peer sends, an error here ends its connection, never the process.
  run().catch(() => socket.destroy());
}

/**
 * Splits a TCP stream into RPC records: 4-byte marks (last-fragment bit, length) and their
 * fragments. Throws RecordError on a record over MAX_RECORD_BYTES (marks counted) or of more
 * than MAX_FRAGMENTS fragments: empty fragments cost the server memory too.
 */
export class RecordReader {
  #chunks: Buffer[] = [];
  #buffered = 0;
  #fragments: Buffer[] = [];
  #recordBytes = 0;
  /** The fragment being read: its length and whether it ends the record; undefined: a mark. */
  #fragment: { readonly length: number; readonly last: boolean } | undefined;

  /** Bytes received and not yet taken into a record. */
  get buffered(): number {
    return this.#buffered;
  }

  push(chunk: Buffer): void {
    this.#chunks.push(chunk);
    this.#buffered += chunk.length;
  }

  /** The next whole record, or undefined until more bytes come. */
  next(): Buffer | undefined {
    for (;;) {
      if (!this.#fragment) {
        if (this.#buffered < 4) return undefined;
        const mark = this.#take(4).readUInt32BE(0);
        const length = mark & 0x7fffffff;
        this.#recordBytes += 4 + length;
        if (this.#recordBytes > MAX_RECORD_BYTES) throw new RecordError("record too large");
        if (this.#fragments.length >= MAX_FRAGMENTS) throw new RecordError("too many fragments");
        this.#fragment = { length, last: (mark & 0x80000000) !== 0 };
      }
      if (this.#buffered < this.#fragment.length) return undefined;
      this.#fragments.push(this.#take(this.#fragment.length));
      const { last } = this.#fragment;
      this.#fragment = undefined;
      if (!last) continue;
      const record =
        this.#fragments.length === 1
          ? (this.#fragments[0] as Buffer)
          : Buffer.concat(this.#fragments);
      this.#fragments = [];
      this.#recordBytes = 0;
      return record;
    }
  }

  /** The next `bytes` bytes received (copied only when they span chunks). */
  #take(bytes: number): Buffer {
    const first = this.#chunks[0];
    if (first && first.length >= bytes) {
      this.#buffered -= bytes;
      if (first.length === bytes) this.#chunks.shift();
      else this.#chunks[0] = first.subarray(bytes);
      return first.subarray(0, bytes);
    }
    const out = Buffer.allocUnsafe(bytes);
    for (let at = 0; at < bytes; ) {
      const chunk = this.#chunks[0] as Buffer;
      const n = Math.min(chunk.length, bytes - at);
      chunk.copy(out, at, 0, n);
      at += n;
      if (n === chunk.length) this.#chunks.shift();
      else this.#chunks[0] = chunk.subarray(n);
    }
    this.#buffered -= bytes;
    return out;
  }
}

export class RecordError extends Error {
  override readonly name = "RecordError";
}

/**
 * Waits for the peer to read what it was sent: true once the socket drained, false when it
 * closed or its unsent bytes did not go down for `stallMs`.
 */
function drained(socket: Socket, stallMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    let last = socket.writableLength;
    const timer = setInterval(() => {
      if (socket.writableLength < last) last = socket.writableLength;
      else finish(false);
    }, stallMs);
    const finish = (ok: boolean) => {
      clearInterval(timer);
      socket.off("drain", onDrain).off("close", onClose);
      resolve(ok);
    };
    const onDrain = () => finish(true);
    const onClose = () => finish(false);
    socket.on("drain", onDrain).on("close", onClose);
  });
}

/** A reply record: its mark and its segments, written without copying them together. */
function send(socket: Socket, reply: XdrWriter): void {
  const mark = Buffer.allocUnsafe(4);
  mark.writeUInt32BE((0x80000000 | reply.length) >>> 0);
  socket.cork();
  socket.write(mark);
  for (const segment of reply.segments()) socket.write(segment);
  socket.uncork();
}

/** The reply to a record; undefined when it is no call or cannot be read (dropped then). */
async function answer(
  record: Buffer,
  programs: readonly RpcProgram[],
): Promise<XdrWriter | undefined> {
  try {
    return await dispatch(new XdrReader(record), programs);
  } catch {
    return undefined;
  }
}

/** One call's reply; undefined when the record is no call (the connection is dropped). */
async function dispatch(
  call: XdrReader,
  programs: readonly RpcProgram[],
): Promise<XdrWriter | undefined> {
  const xid = call.u32();
  if (call.u32() !== CALL) return undefined;
  const reply = new XdrWriter().u32(xid).u32(REPLY);
  if (call.u32() !== 2) {
    return reply.u32(MSG_DENIED).u32(RPC_MISMATCH).u32(2).u32(2);
  }
  const program = call.u32();
  const version = call.u32();
  const procedure = call.u32();
  const credentials = readCredentials(call);
  call.u32(); // verifier flavor
  call.opaque(400);
  const accepted = reply.u32(MSG_ACCEPTED).u32(AUTH_NONE).u32(0);
  const versions = programs.filter((p) => p.program === program);
  const target = versions.find((p) => p.version === version);
  if (!target) {
    if (versions.length === 0) return accepted.u32(AcceptStat.PROG_UNAVAIL);
    const numbers = versions.map((p) => p.version);
    return accepted
      .u32(AcceptStat.PROG_MISMATCH)
      .u32(Math.min(...numbers))
      .u32(Math.max(...numbers));
  }
  let result: ProgramReply;
  try {
    result = await target.call(procedure, call, credentials);
  } catch (err) {
    result = { stat: err instanceof XdrError ? AcceptStat.GARBAGE_ARGS : AcceptStat.SYSTEM_ERR };
  }
  accepted.u32(result.stat);
  return result.stat === AcceptStat.SUCCESS ? accepted.append(result.body) : accepted;
}

function readCredentials(call: XdrReader): Credentials {
  const flavor = call.u32();
  const body = call.opaque(400);
  if (flavor !== AUTH_UNIX) return NOBODY;
  const unix = new XdrReader(body);
  unix.u32(); // stamp
  unix.string(255); // machine name
  const squash = (id: number) => (id === 0 ? NOBODY_ID : id);
  return { uid: squash(unix.u32()), gid: squash(unix.u32()) };
}
