import { Agent } from "node:http";
import type { Readable } from "node:stream";
import { type Client, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Filesystem } from "../../protocol/gen/filesystem/filesystem_pb.js";
import { Process } from "../../protocol/gen/process/process_pb.js";
import { ENVD_PORT } from "../../protocol/index.js";
import { GUEST_HEAD_MAX_BYTES, type GuestReply, guestRequest } from "../../shared/index.js";

/** Largest envd reply body read: /init, /health and /files answer a few bytes, /metrics ~300. */
export const ENVD_REPLY_MAX_BYTES = 64 * 1024;

export interface EnvdClientOptions {
  /** The access token the guest's envd holds, sent with every call. */
  readonly token?: string;
  /** Largest Connect message taken from envd (process output, a directory listing). */
  readonly readMaxBytes: number;
}

export interface EnvdRequestOptions {
  /** A body sent as JSON. */
  readonly json?: unknown;
  /** A body sent as is, with `contentType` (a stream: as it is read, chunked). */
  readonly body?: string | Uint8Array | Readable;
  readonly contentType?: string;
  /** Basic auth as this user (envd takes the username from it); none when absent. */
  readonly user?: string;
  /** The whole exchange, from connecting to the reply's last byte. */
  readonly timeoutMs: number;
  /** Aborts the exchange at once (a kill, a cancelled build). */
  readonly signal?: AbortSignal;
}

/**
 * The host's client of one guest's envd: plain HTTP requests (/init, /health, /files,
 * /metrics) and the Connect process and filesystem services, as the e2b SDK speaks them
 * (JSON messages, Basic auth naming the user, the access token). The guest's root user may
 * replace envd with anything, so every request is bounded in head (16 KiB), body
 * (ENVD_REPLY_MAX_BYTES) and whole time, and every Connect message by `readMaxBytes`, never
 * compressed (a guest's gzip could inflate past any limit). Its connections are its own and
 * none outlives `close()`: a slot's address is reused by the next sandbox, and a kept-alive
 * socket to a gone VM's address must never carry a request meant for the next one.
 */
export class EnvdClient {
  readonly host: string;
  readonly #token: string | undefined;
  readonly #readMaxBytes: number;
  readonly #agent = new Agent({ keepAlive: true });
  #transport: Transport | undefined;
  #process: Client<typeof Process> | undefined;
  #filesystem: Client<typeof Filesystem> | undefined;

  constructor(host: string, options: EnvdClientOptions) {
    this.host = host;
    this.#token = options.token;
    this.#readMaxBytes = options.readMaxBytes;
  }

  /** The Connect process service (made on first use: most calls are plain requests). */
  get process(): Client<typeof Process> {
    this.#process ??= createClient(Process, this.#connect());
    return this.#process;
  }

  /** The Connect filesystem service (made on first use). */
  get filesystem(): Client<typeof Filesystem> {
    this.#filesystem ??= createClient(Filesystem, this.#connect());
    return this.#filesystem;
  }

  #connect(): Transport {
    this.#transport ??= createConnectTransport({
      baseUrl: `http://${this.host}:${ENVD_PORT}`,
      httpVersion: "1.1",
      useBinaryFormat: false,
      acceptCompression: [],
      readMaxBytes: this.#readMaxBytes,
      nodeOptions: { agent: this.#agent, maxHeaderSize: GUEST_HEAD_MAX_BYTES },
    });
    return this.#transport;
  }

  /** One bounded exchange with envd (`guestRequest`). */
  request(method: string, path: string, options: EnvdRequestOptions): Promise<GuestReply> {
    const body = options.json === undefined ? options.body : JSON.stringify(options.json);
    const contentType = options.json === undefined ? options.contentType : "application/json";
    return guestRequest({
      host: this.host,
      port: ENVD_PORT,
      method,
      path,
      label: `envd ${method} ${path.split("?")[0]}`,
      body,
      headers: {
        ...(body !== undefined && contentType && { "content-type": contentType }),
        ...(options.user === undefined ? this.#tokenHeader() : this.headers(options.user)),
      },
      agent: this.#agent,
      timeoutMs: options.timeoutMs,
      maxBodyBytes: ENVD_REPLY_MAX_BYTES,
      signal: options.signal,
    });
  }

  /** Headers of a call as `user`: Basic auth with that username, and the access token. */
  headers(user: string): Record<string, string> {
    return {
      authorization: `Basic ${Buffer.from(`${user}:`).toString("base64")}`,
      ...this.#tokenHeader(),
    };
  }

  /** Closes its connections (the call is over, or the VM is gone or about to be). */
  close(): void {
    this.#agent.destroy();
  }

  #tokenHeader(): Record<string, string> {
    return this.#token ? { "x-access-token": this.#token } : {};
  }
}

/** A reply's body for an error message: its first bytes, printable (the guest chose them). */
export function replyExcerpt(reply: GuestReply): string {
  return reply.body
    .subarray(0, 200)
    .toString("utf8")
    .replace(/[^\x20-\x7e]/g, "?");
}
