/**
 * A HOSTILE STAND-IN for envd (or for any server in a guest): what a guest's root user can
 * run in envd's place. A raw TCP server, so that it can break HTTP the ways a hostile one
 * would. It listens where the host expects envd (a loopback address of the test's own on
 * port 49983, or any port for the proxy) and counts what it sent and which connections the
 * host still holds, so tests can show that every host call is cut at its bound.
 *
 * Modes (switchable at any time; a connection keeps the mode it was accepted with):
 * - `healthy`       answers like envd: /init and /health 204, /metrics JSON, /files 200
 * - `endless`       200, then a chunked body forever, as fast as the host reads
 * - `trickle`       the response head one byte per `intervalMs`, never finished
 * - `trickle-body`  a 200 head, then one body byte per `intervalMs`, forever
 * - `huge-headers`  a 200 status line, then headers as fast as the host reads, forever
 * - `huge-body`     a 200 head with no length (close-delimited), then `hugeBytes` of body
 * - `silent`        reads the request, never answers (never answers)
 * - `stalled`       accepts, never reads nor answers (accepts then hangs)
 * - `connect-endless`  a Connect server-streaming reply of process output events, forever
 * - `connect-huge-message`  a Connect stream whose first message claims 1 GiB
 *   (both on the process service only; the rest answers as `healthy`)
 */
import assert from "node:assert/strict";
import { createServer, type Server, type Socket } from "node:net";
import { create, toBinary } from "@bufbuild/protobuf";
import { processPb } from "../../src/protocol/index.js";
import { WarrenError } from "../../src/shared/index.js";

export type HostileMode =
  | "healthy"
  | "endless"
  | "trickle"
  | "trickle-body"
  | "huge-headers"
  | "huge-body"
  | "silent"
  | "stalled"
  | "connect-endless"
  | "connect-huge-message";

export interface HostileEnvdOptions {
  readonly mode: HostileMode;
  /** Default: a random loopback address of its own (127.x.y.z), so tests never collide. */
  readonly host?: string;
  /** Default 49983 (envd's), where EnvdGuestAgent and GuestShell connect. 0: any free port. */
  readonly port?: number;
  /** Pace of the trickling modes. Default 1000 ms (one byte a second). */
  readonly intervalMs?: number;
  /** Body size of `huge-body`. Default 1 GiB. */
  readonly hugeBytes?: number;
}

const CHUNK = Buffer.alloc(64 * 1024, "x");

export class HostileEnvd {
  mode: HostileMode;
  /** Bytes written to the host, all connections together. */
  bytesSent = 0;
  /** Connections accepted. */
  connections = 0;
  /** Request lines read (`POST /init`), in order. */
  readonly requests: string[] = [];
  readonly #open = new Set<Socket>();
  readonly #server: Server;
  readonly #intervalMs: number;
  readonly #hugeBytes: number;
  #host = "";
  #port = 0;

  private constructor(options: HostileEnvdOptions) {
    this.mode = options.mode;
    this.#intervalMs = options.intervalMs ?? 1_000;
    this.#hugeBytes = options.hugeBytes ?? 1024 ** 3;
    this.#server = createServer((socket) => this.#accept(socket));
  }

  static async start(options: HostileEnvdOptions): Promise<HostileEnvd> {
    const envd = new HostileEnvd(options);
    const host = options.host ?? randomLoopback();
    await new Promise<void>((resolve, reject) => {
      envd.#server.once("error", reject);
      envd.#server.listen(options.port ?? 49983, host, () => resolve());
    });
    const address = envd.#server.address();
    if (!address || typeof address === "string") throw new Error("no address");
    envd.#host = host;
    envd.#port = address.port;
    return envd;
  }

  get host(): string {
    return this.#host;
  }

  get port(): number {
    return this.#port;
  }

  /** Connections the host has not closed yet. */
  get open(): number {
    return this.#open.size;
  }

  /** Resolves once the host has closed every connection (fails the test after `withinMs`). */
  async allClosed(withinMs = 2_000): Promise<void> {
    // A stalled connection sees the host's FIN only once it reads again.
    for (const socket of this.#open) socket.resume();
    const deadline = Date.now() + withinMs;
    while (this.#open.size > 0) {
      if (Date.now() > deadline) {
        throw new Error(`${this.#open.size} connections still open after ${withinMs} ms`);
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  async close(): Promise<void> {
    for (const socket of this.#open) socket.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #accept(socket: Socket): void {
    this.connections += 1;
    this.#open.add(socket);
    const mode = this.mode;
    const timers: NodeJS.Timeout[] = [];
    socket.on("error", () => {});
    socket.once("close", () => {
      this.#open.delete(socket);
      for (const timer of timers) clearInterval(timer);
    });
    if (mode === "stalled") {
      socket.pause();
      return;
    }
    let head = "";
    let answered = false;
    socket.on("data", (data: Buffer) => {
      if (answered) return; // request bodies and later requests: read and dropped
      head += data.toString("latin1");
      const end = head.indexOf("\r\n\r\n");
      if (end < 0) return;
      answered = true;
      const [line = "", ...fields] = head.slice(0, end).split("\r\n");
      const [method = "", target = ""] = line.split(" ");
      this.requests.push(`${method} ${target.split("?")[0]}`);
      const headers = new Map(
        fields.map((f) => [
          f.slice(0, f.indexOf(":")).toLowerCase(),
          f.slice(f.indexOf(":") + 1).trim(),
        ]),
      );
      // The Connect modes are hostile on the process service only: the rest of a walk
      // (/init, /files, ListDir) gets as far as the stream.
      const path = target.split("?")[0] ?? "";
      const connectMode = mode === "connect-endless" || mode === "connect-huge-message";
      const effective = connectMode && !path.startsWith("/process.") ? "healthy" : mode;
      this.#answer(effective, socket, method, target, headers, timers);
    });
  }

  #answer(
    mode: HostileMode,
    socket: Socket,
    method: string,
    target: string,
    headers: Map<string, string>,
    timers: NodeJS.Timeout[],
  ): void {
    const write = (data: string | Buffer) => {
      if (socket.destroyed) return false;
      this.bytesSent += Buffer.byteLength(data);
      return socket.write(data);
    };
    /** Writes `next()` whenever the host has read what came before, until it returns undefined. */
    const flood = (next: () => Buffer | string | undefined) => {
      const pump = () => {
        for (;;) {
          const data = next();
          if (data === undefined) {
            socket.end();
            return;
          }
          if (!write(data)) return;
        }
      };
      socket.on("drain", pump);
      pump();
    };
    const every = (tick: () => void) => timers.push(setInterval(tick, this.#intervalMs));
    switch (mode) {
      case "healthy":
        write(healthyReply(method, target.split("?")[0] ?? ""));
        return;
      case "silent":
      case "stalled":
        return;
      case "endless":
        write("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n");
        flood(() => `${CHUNK.length.toString(16)}\r\n${CHUNK.toString("latin1")}\r\n`);
        return;
      case "trickle": {
        const text = "HTTP/1.1 200 OK\r\nx-slow: ".padEnd(1 << 20, "y");
        let i = 0;
        every(() => write(text[i++ % text.length] as string));
        return;
      }
      case "trickle-body":
        write("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n");
        every(() => write("1\r\nz\r\n"));
        return;
      case "huge-headers": {
        write("HTTP/1.1 200 OK\r\n");
        let n = 0;
        flood(() => `x-pad-${n++}: ${"h".repeat(1000)}\r\n`);
        return;
      }
      case "huge-body": {
        write("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n");
        let left = this.#hugeBytes;
        flood(() => {
          if (left <= 0) return undefined;
          const chunk = left >= CHUNK.length ? CHUNK : CHUNK.subarray(0, left);
          left -= chunk.length;
          return chunk;
        });
        return;
      }
      case "connect-endless": {
        const json = (headers.get("content-type") ?? "").includes("json");
        write(
          `HTTP/1.1 200 OK\r\ncontent-type: application/connect+${json ? "json" : "proto"}\r\ntransfer-encoding: chunked\r\n\r\n`,
        );
        const events = [startEvent(json), ...Array(1_000).fill(dataEvent(json))];
        let i = 0;
        flood(() => {
          const message = events[Math.min(i++, events.length - 1)] as Buffer;
          return Buffer.concat([
            Buffer.from(`${message.length.toString(16)}\r\n`),
            message,
            Buffer.from("\r\n"),
          ]);
        });
        return;
      }
      case "connect-huge-message": {
        const json = (headers.get("content-type") ?? "").includes("json");
        write(
          `HTTP/1.1 200 OK\r\ncontent-type: application/connect+${json ? "json" : "proto"}\r\nconnection: close\r\n\r\n`,
        );
        const envelope = Buffer.alloc(5);
        envelope.writeUInt32BE(1024 ** 3, 1);
        write(envelope);
        flood(() => CHUNK);
        return;
      }
    }
  }
}

/** A loopback address no other test picks (127.0.0.0/8 is all local on Linux). */
function randomLoopback(): string {
  const byte = () => 1 + Math.floor(Math.random() * 254);
  return `127.${byte()}.${byte()}.${byte()}`;
}

function healthyReply(method: string, path: string): string {
  const reply = (status: string, body = "", type = "text/plain") =>
    `HTTP/1.1 ${status}\r\ncontent-type: ${type}\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`;
  if ((method === "POST" && path === "/init") || path === "/health") return reply("204 No Content");
  if (path === "/metrics") {
    const metrics = {
      ts: Math.floor(Date.now() / 1000),
      cpu_count: 1,
      cpu_used_pct: 2.5,
      mem_total: 512 * 1024 * 1024,
      mem_used: 64 * 1024 * 1024,
      mem_cache: 0,
      mem_total_mib: 512,
      mem_used_mib: 64,
      disk_total: 2 * 1024 ** 3,
      disk_used: 1024 ** 3,
    };
    return reply("200 OK", JSON.stringify(metrics), "application/json");
  }
  if (path === "/files") return reply("200 OK", method === "GET" ? "warren" : "[]");
  if (path === "/filesystem.Filesystem/ListDir") return reply("200 OK", "{}", "application/json");
  return reply("404 Not Found");
}

/** One Connect stream message (flags 0, big-endian length, payload). */
function envelope(payload: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

function startEvent(json: boolean): Buffer {
  if (json) return envelope(Buffer.from(JSON.stringify({ event: { start: { pid: 7 } } })));
  const message = create(processPb.StartResponseSchema, {
    event: { event: { case: "start", value: { pid: 7 } } },
  });
  return envelope(Buffer.from(toBinary(processPb.StartResponseSchema, message)));
}

function dataEvent(json: boolean): Buffer {
  const output = Buffer.alloc(32 * 1024, "o");
  if (json) {
    const event = { event: { data: { stdout: output.toString("base64") } } };
    return envelope(Buffer.from(JSON.stringify(event)));
  }
  const message = create(processPb.StartResponseSchema, {
    event: { event: { case: "data", value: { output: { case: "stdout", value: output } } } },
  });
  return envelope(Buffer.from(toBinary(processPb.StartResponseSchema, message)));
}

/** Runs `call`, expects it to fail within `withinMs` with `reason`; returns the error. */
export async function failsWithin(
  withinMs: number,
  reason: string | undefined,
  call: () => Promise<unknown>,
): Promise<Error> {
  const started = performance.now();
  const err = await call().then(
    () => assert.fail("the call succeeded against a hostile guest"),
    (e: unknown) => e as Error,
  );
  const tookMs = performance.now() - started;
  assert.ok(tookMs < withinMs, `failed after ${Math.round(tookMs)} ms, bound ${withinMs} ms`);
  if (reason !== undefined) {
    assert.ok(err instanceof WarrenError, `a WarrenError, got ${err}`);
    assert.equal(err.reason, reason, err.message);
  }
  return err;
}
