import { connect, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import { QmpError, VmmError } from "../errors.js";

export interface QmpEvent {
  readonly event: string;
  readonly data?: Record<string, unknown>;
}

interface Pending {
  readonly command: string;
  readonly resolve: (value: unknown) => void;
  readonly reject: (err: Error) => void;
  readonly timer: NodeJS.Timeout;
}

export interface QmpClientOptions {
  /** How long the socket may take to accept and QEMU to greet; default 10 s. */
  readonly connectTimeoutMs?: number;
  /** How long QEMU may take to answer a command before the connection is given up; default 60 s. */
  readonly commandTimeoutMs?: number;
  /** The longest message accepted (a QMP line); default 1 MiB. Longer gives the connection up. */
  readonly maxMessageBytes?: number;
}

const DEFAULTS = {
  connectTimeoutMs: 10_000,
  commandTimeoutMs: 60_000,
  maxMessageBytes: 1 << 20,
} as const;

/**
 * A QMP connection to one QEMU: sends commands, matches replies by id, surfaces QMP errors
 * as QmpError naming the command, and hands asynchronous events to listeners.
 *
 * The QEMU at the other end may be its guest's (an escaped VMM): nothing it sends may grow
 * the server's memory or keep a caller waiting for ever. A message longer than
 * `maxMessageBytes` (all that is ever buffered: the line being read) and a command not
 * answered within `commandTimeoutMs` give the connection up with an error saying so; every
 * command and event wait on it then fails at once, and the VM's owner tears it down.
 */
export class QmpClient {
  readonly #stream: Duplex;
  /** The line being read, in pieces, and their length. */
  #partial: Buffer[] = [];
  #partialBytes = 0;
  #nextId = 1;
  #pending = new Map<number, Pending>();
  #listeners = new Set<(event: QmpEvent) => void>();
  #failureListeners = new Set<(err: Error) => void>();
  #closed: Error | undefined;
  readonly #vmId: string | undefined;
  readonly #options: Required<QmpClientOptions>;
  /** Settles with QEMU's greeting, or with the connection's failure if it never comes. */
  readonly #greeting: Promise<void>;
  #greeted: { resolve: () => void; reject: (err: Error) => void } | undefined;

  private constructor(stream: Duplex, vmId: string | undefined, options: QmpClientOptions) {
    this.#stream = stream;
    this.#vmId = vmId;
    this.#options = { ...DEFAULTS, ...options };
    this.#greeting = new Promise<void>((resolve, reject) => {
      this.#greeted = { resolve, reject };
    });
    stream.on("data", (chunk: Buffer) => this.#onData(chunk));
    stream.on("error", (err) =>
      this.#fail(new VmmError(`QMP connection error: ${err.message}`, vmId)),
    );
    stream.on("close", () =>
      this.#fail(new VmmError("QMP connection closed (QEMU exited?)", vmId)),
    );
  }

  /** Connects to a QEMU's QMP socket, waits for the greeting and leaves negotiation mode. */
  static async connect(
    path: string,
    vmId?: string,
    options: QmpClientOptions = {},
  ): Promise<QmpClient> {
    const timeoutMs = options.connectTimeoutMs ?? DEFAULTS.connectTimeoutMs;
    const socket = await new Promise<Socket>((resolve, reject) => {
      const s = connect(path);
      const timer = setTimeout(() => {
        s.destroy();
        reject(new VmmError(`QMP socket ${path} did not accept within ${timeoutMs} ms`, vmId));
      }, timeoutMs);
      s.once("connect", () => {
        clearTimeout(timer);
        resolve(s);
      });
      s.once("error", (err) => {
        clearTimeout(timer);
        reject(
          new VmmError(`cannot connect to QMP socket ${path}: ${err.message}`, vmId, {
            cause: err,
          }),
        );
      });
    });
    return QmpClient.attach(socket, vmId, options);
  }

  /**
   * Speaks QMP over a connected stream (a socket, or QEMU's stdin and stdout joined with
   * `Duplex.from`): waits for the greeting and leaves negotiation mode.
   */
  static async attach(
    stream: Duplex,
    vmId?: string,
    options: QmpClientOptions = {},
  ): Promise<QmpClient> {
    const client = new QmpClient(stream, vmId, options);
    const { connectTimeoutMs } = client.#options;
    const timer = setTimeout(
      () =>
        client.#fail(new VmmError(`QEMU sent no QMP greeting within ${connectTimeoutMs} ms`, vmId)),
      connectTimeoutMs,
    );
    try {
      await client.#greeting;
    } finally {
      clearTimeout(timer);
    }
    await client.execute("qmp_capabilities");
    return client;
  }

  /** Runs a QMP command; rejects with QmpError when QEMU reports an error. */
  execute<T = unknown>(command: string, args?: Record<string, unknown>): Promise<T> {
    if (this.#closed) return Promise.reject(this.#closed);
    const id = this.#nextId++;
    const message = JSON.stringify(
      args ? { execute: command, arguments: args, id } : { execute: command, id },
    );
    return new Promise<T>((resolve, reject) => {
      const { commandTimeoutMs } = this.#options;
      const timer = setTimeout(
        () =>
          this.#fail(
            new VmmError(`QMP ${command} got no answer within ${commandTimeoutMs} ms`, this.#vmId),
          ),
        commandTimeoutMs,
      );
      this.#pending.set(id, { command, resolve: resolve as (v: unknown) => void, reject, timer });
      this.#stream.write(`${message}\n`);
    });
  }

  /**
   * Resolves with the first event named `name` for which `match` holds; rejects after
   * `timeoutMs`, or at once when the connection fails.
   */
  waitForEvent(
    name: string,
    match: (event: QmpEvent) => boolean = () => true,
    timeoutMs = 30_000,
  ): Promise<QmpEvent> {
    if (this.#closed) return Promise.reject(this.#closed);
    return new Promise((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        this.#listeners.delete(listener);
        this.#failureListeners.delete(failed);
      };
      const timer = setTimeout(() => {
        done();
        reject(
          new VmmError(`timed out after ${timeoutMs} ms waiting for QMP event ${name}`, this.#vmId),
        );
      }, timeoutMs);
      const listener = (event: QmpEvent) => {
        if (event.event !== name || !match(event)) return;
        done();
        resolve(event);
      };
      const failed = (err: Error) => {
        done();
        reject(err);
      };
      this.#listeners.add(listener);
      this.#failureListeners.add(failed);
    });
  }

  onEvent(listener: (event: QmpEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  close(): void {
    this.#fail(new VmmError("QMP connection closed", this.#vmId));
  }

  #onData(chunk: Buffer): void {
    let start = 0;
    for (;;) {
      const newline = chunk.indexOf(0x0a, start);
      if (newline < 0) break;
      const piece = chunk.subarray(start, newline);
      if (this.#tooLong(piece.length)) return;
      const line = this.#partial.length > 0 ? Buffer.concat([...this.#partial, piece]) : piece;
      this.#partial = [];
      this.#partialBytes = 0;
      const text = line.toString("utf8").trim();
      if (text) this.#onMessage(text);
      if (this.#closed) return;
      start = newline + 1;
    }
    const rest = chunk.subarray(start);
    if (rest.length === 0 || this.#tooLong(rest.length)) return;
    this.#partial.push(rest);
    this.#partialBytes += rest.length;
  }

  /** Gives the connection up when the line being read would grow past the limit. */
  #tooLong(more: number): boolean {
    const { maxMessageBytes } = this.#options;
    if (this.#partialBytes + more <= maxMessageBytes) return false;
    this.#fail(new VmmError(`QMP message longer than ${maxMessageBytes} bytes`, this.#vmId));
    return true;
  }

  #onMessage(line: string): void {
    let message: Record<string, unknown>;
    try {
      message = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    if (typeof message !== "object" || message === null) return;
    if ("QMP" in message) {
      this.#greeted?.resolve();
      return;
    }
    if (typeof message.event === "string") {
      const data = message.data;
      const event = {
        event: message.event,
        data:
          typeof data === "object" && data !== null ? (data as Record<string, unknown>) : undefined,
      };
      for (const listener of [...this.#listeners]) listener(event);
      return;
    }
    const pending = typeof message.id === "number" ? this.#pending.get(message.id) : undefined;
    if (!pending) return;
    this.#pending.delete(message.id as number);
    clearTimeout(pending.timer);
    if ("error" in message) {
      const error = (message.error ?? {}) as { class?: unknown; desc?: unknown };
      pending.reject(
        new QmpError(
          pending.command,
          typeof error.class === "string" ? error.class : "GenericError",
          typeof error.desc === "string" ? error.desc : "",
          this.#vmId,
        ),
      );
    } else {
      pending.resolve(message.return);
    }
  }

  #fail(err: Error): void {
    if (this.#closed) return;
    this.#closed = err;
    this.#partial = [];
    this.#partialBytes = 0;
    this.#stream.destroy();
    this.#greeted?.reject(err);
    for (const pending of this.#pending.values()) {
      clearTimeout(pending.timer);
      pending.reject(err);
    }
    this.#pending.clear();
    for (const failed of [...this.#failureListeners]) failed(err);
  }
}
