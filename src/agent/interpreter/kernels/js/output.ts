import { Buffer } from "node:buffer";
import childProcess, { ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import fs from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { Readable } from "node:stream";
import { StringDecoder } from "node:string_decoder";
import type { Stream } from "./events.js";

export type OutputSink = (stream: Stream, text: string) => void;

type Forward = (stream: Stream, chunk: unknown, encoding?: unknown) => void;

/**
 * Takes over fd 1 and 2 as far as JavaScript can (Node cannot dup2 a pipe it was given):
 * writes through process.stdout/stderr, and fs.write/fs.writeSync on fd 1 and 2, go to
 * `sink`; child processes spawned with inherited stdout/stderr get pipes instead, forwarded
 * the same way. Native code writing to fd 1 or 2 directly is not seen (its bytes reach envd's
 * diagnostic tail). Child processes never inherit fd 0 (envd's requests) nor, when their
 * stdio is rewritten, fd 3 (the events).
 */
export function captureOutput(sink: OutputSink): void {
  const decoders = { stdout: new StringDecoder("utf8"), stderr: new StringDecoder("utf8") };
  const forward: Forward = (stream, chunk, encoding) => {
    if (typeof chunk === "string") {
      const utf8 = encoding === undefined || encoding === "utf8" || encoding === "utf-8";
      sink(
        stream,
        utf8 ? chunk : decoders[stream].write(Buffer.from(chunk, encoding as BufferEncoding)),
      );
    } else if (ArrayBuffer.isView(chunk)) {
      sink(
        stream,
        decoders[stream].write(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)),
      );
    }
  };
  takeOverStream(process.stdout, "stdout", forward);
  takeOverStream(process.stderr, "stderr", forward);
  takeOverFs(forward);
  takeOverChildProcesses(forward);
  syncBuiltinESMExports();
  // fd 0 carries envd's requests: user code reading stdin gets an empty stream instead.
  const stdin = new Readable({ read: () => stdin.push(null) });
  Object.defineProperty(process, "stdin", { value: stdin, configurable: true, writable: true });
}

function takeOverStream(target: NodeJS.WriteStream, stream: Stream, forward: Forward): void {
  target.write = ((chunk: unknown, encoding?: unknown, callback?: unknown) => {
    const done = typeof encoding === "function" ? encoding : callback;
    forward(stream, chunk, typeof encoding === "function" ? undefined : encoding);
    if (typeof done === "function") process.nextTick(done as () => void);
    return true;
  }) as typeof target.write;
}

const FD_STREAM: Readonly<Record<number, Stream>> = { 1: "stdout", 2: "stderr" };

function takeOverFs(forward: Forward): void {
  const { write, writeSync } = fs;
  /** (buffer, offset?, length?) or (buffer, {offset, length}) or (string, position?, encoding?) */
  const send = (stream: Stream, data: unknown, a: unknown, b: unknown): number => {
    if (typeof data === "string") {
      const encoding = typeof b === "string" ? b : undefined;
      forward(stream, data, encoding);
      return Buffer.byteLength(data, encoding as BufferEncoding | undefined);
    }
    if (!ArrayBuffer.isView(data)) return 0;
    const options =
      typeof a === "object" && a !== null ? (a as { offset?: number; length?: number }) : {};
    const offset = typeof a === "number" ? a : (options.offset ?? 0);
    const length = typeof b === "number" ? b : (options.length ?? data.byteLength - offset);
    forward(stream, new Uint8Array(data.buffer, data.byteOffset + offset, length));
    return length;
  };
  fs.writeSync = ((fd: number, data: unknown, ...rest: unknown[]) => {
    const stream = FD_STREAM[fd];
    if (!stream) return (writeSync as (...args: unknown[]) => number)(fd, data, ...rest);
    return send(stream, data, rest[0], rest[1]);
  }) as typeof fs.writeSync;
  fs.write = ((fd: number, data: unknown, ...rest: unknown[]) => {
    const stream = FD_STREAM[fd];
    if (!stream) return (write as (...args: unknown[]) => void)(fd, data, ...rest);
    const callback = rest.findLast((arg) => typeof arg === "function") as
      | ((err: null, written: number, data: unknown) => void)
      | undefined;
    const args = rest.filter((arg) => typeof arg !== "function");
    const written = send(stream, data, args[0], args[1]);
    if (callback) process.nextTick(callback, null, written, data);
  }) as typeof fs.write;
}

/** How a child's stdio is rewritten: its entries, and which of its fds go to which stream. */
interface Redirected {
  readonly stdio: unknown[];
  readonly captured: ReadonlyMap<number, Stream>;
}

let devNull: number | undefined;

/** Inherited stdin becomes nothing, inherited stdout/stderr `pipe`; fd 3 is shut. */
function redirect(stdio: unknown, pipe: (fd: number) => unknown): Redirected | undefined {
  const entries =
    typeof stdio === "string"
      ? [stdio, stdio, stdio]
      : Array.isArray(stdio)
        ? [...stdio]
        : undefined;
  if (!entries) return undefined;
  const captured = new Map<number, Stream>();
  if (entries[0] === "inherit" || entries[0] === 0 || entries[0] === process.stdin) {
    entries[0] = "ignore";
  }
  for (const fd of [1, 2]) {
    const entry = entries[fd];
    const stream: Stream | undefined =
      entry === "inherit"
        ? FD_STREAM[fd]
        : entry === 1 || entry === process.stdout
          ? "stdout"
          : entry === 2 || entry === process.stderr
            ? "stderr"
            : undefined;
    if (!stream) continue;
    entries[fd] = pipe(fd);
    captured.set(fd, stream);
  }
  if (entries.length <= 3) {
    devNull ??= fs.openSync("/dev/null", "r+");
    while (entries.length < 3) entries.push(undefined);
    entries.push(devNull);
  }
  return { stdio: entries, captured };
}

function takeOverChildProcesses(forward: Forward): void {
  // Every asynchronous spawn (spawn, exec, execFile, fork) goes through this method: the
  // inherited fds become pipes, read as the child writes. (No stdio given means pipes; it is
  // spelt out so that fd 3 can be shut too.)
  const proto = ChildProcess.prototype as unknown as {
    spawn(options: { stdio?: unknown }): unknown;
  };
  const spawn = proto.spawn;
  proto.spawn = function (this: ChildProcess, options) {
    const redirected = redirect(options.stdio ?? "pipe", () => "pipe");
    if (!redirected) return spawn.call(this, options);
    const result = spawn.call(this, { ...options, stdio: redirected.stdio });
    for (const [fd, stream] of redirected.captured) {
      this.stdio?.[fd]?.on("data", (chunk: Buffer) => forward(stream, chunk));
    }
    return result;
  };

  // The synchronous ones block the event loop, so a pipe could fill up: their inherited fds
  // become unlinked temporary files instead, read back when the child is done. What they
  // return is what it would have been with the fds inherited. No stdio given stays so
  // (execSync copies the child's stderr to process.stderr only then).
  const wrapSync = <F extends (...args: never[]) => unknown>(original: F): F =>
    ((...args: unknown[]) => {
      const call = original as unknown as (...a: unknown[]) => unknown;
      const at = args.findLastIndex(
        (a) => typeof a === "object" && a !== null && !Array.isArray(a),
      );
      const options = at === -1 ? undefined : (args[at] as { stdio?: unknown });
      const files = new Map<number, number>();
      let redirected: Redirected | undefined;
      try {
        redirected = redirect(options?.stdio, (fd) => {
          const file = tempFile();
          files.set(fd, file);
          return file;
        });
      } catch {
        redirected = undefined; // no temporary file to be had: run it as asked
      }
      if (!redirected) {
        for (const file of files.values()) fs.closeSync(file);
        return call(...args);
      }
      const patched = [...args];
      patched[at] = { ...options, stdio: redirected.stdio };
      try {
        return call(...patched);
      } finally {
        for (const [fd, stream] of redirected.captured) {
          const file = files.get(fd) as number;
          forward(stream, readAll(file));
          fs.closeSync(file);
        }
      }
    }) as unknown as F;
  childProcess.spawnSync = wrapSync(childProcess.spawnSync);
  childProcess.execSync = wrapSync(childProcess.execSync);
  childProcess.execFileSync = wrapSync(childProcess.execFileSync);
}

function tempFile(): number {
  const path = join(tmpdir(), `warren-js-kernel-${process.pid}-${randomUUID()}`);
  const fd = fs.openSync(path, "w+", 0o600);
  fs.unlinkSync(path);
  return fd;
}

function readAll(fd: number): Buffer {
  const data = Buffer.alloc(fs.fstatSync(fd).size);
  let at = 0;
  while (at < data.length) {
    const n = fs.readSync(fd, data, at, data.length - at, at);
    if (n === 0) break;
    at += n;
  }
  return data.subarray(0, at);
}
