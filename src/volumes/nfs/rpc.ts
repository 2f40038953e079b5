import type { Socket } from "node:net";
import { XdrError, XdrReader, XdrWriter } from "./xdr.js";

/**
 * ONC RPC v2 (RFC 5531) over TCP, server side: records of fragments (a 4-byte mark: last
 * fragment bit, length), one call per record, answered in order per connection. A record
 * over MAX_RECORD_BYTES, a reply to a call, or RPC other than version 2 ends the connection.
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

/** Who the call says it is from (AUTH_UNIX); AUTH_NONE callers are nobody. */
export interface Credentials {
  readonly uid: number;
  readonly gid: number;
}

const NOBODY: Credentials = { uid: 65534, gid: 65534 };

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

/** Serves RPC calls on one connection until it closes. */
export function serveRpc(socket: Socket, programs: readonly RpcProgram[]): void {
  let pending: Buffer = Buffer.alloc(0);
  const fragments: Buffer[] = [];
  let recordBytes = 0;
  let queue = Promise.resolve();
  socket.on("error", () => {});
  socket.on("data", (chunk: Buffer) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    while (pending.length >= 4) {
      const mark = pending.readUInt32BE(0);
      const length = mark & 0x7fffffff;
      if (recordBytes + length > MAX_RECORD_BYTES) return socket.destroy();
      if (pending.length < 4 + length) break;
      fragments.push(pending.subarray(4, 4 + length));
      recordBytes += length;
      pending = pending.subarray(4 + length);
      if ((mark & 0x80000000) === 0) continue;
      const record = Buffer.concat(fragments, recordBytes);
      fragments.length = 0;
      recordBytes = 0;
      queue = queue.then(() => answer(socket, record, programs));
    }
  });
}

async function answer(socket: Socket, record: Buffer, programs: readonly RpcProgram[]) {
  if (socket.destroyed) return;
  let reply: XdrWriter | undefined;
  try {
    reply = await dispatch(new XdrReader(record), programs);
  } catch {
    reply = undefined;
  }
  if (!reply) return void socket.destroy();
  const mark = Buffer.allocUnsafe(4);
  mark.writeUInt32BE((0x80000000 | reply.length) >>> 0);
  socket.write(Buffer.concat([mark, reply.toBuffer()]));
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
  return { uid: unix.u32(), gid: unix.u32() };
}
