import { connect, type Socket } from "node:net";
import { QmpError, VmmError } from "../errors.js";

export interface QmpEvent {
  readonly event: string;
  readonly data?: Record<string, unknown>;
}

interface Pending {
  readonly command: string;
  readonly resolve: (value: unknown) => void;
  readonly reject: (err: Error) => void;
}

/**
 * A QMP connection to one QEMU: sends commands, matches replies by id, surfaces QMP errors
 * as QmpError naming the command, and hands asynchronous events to listeners.
 */
export class QmpClient {
  #socket: Socket;
  #buffer = "";
  #nextId = 1;
  #pending = new Map<number, Pending>();
  #listeners = new Set<(event: QmpEvent) => void>();
  #closed: Error | undefined;
  readonly #vmId: string | undefined;
  /** Settles with QEMU's greeting, or with the connection's failure if it never comes. */
  readonly #greeting: Promise<void>;
  #greeted: { resolve: () => void; reject: (err: Error) => void } | undefined;

  private constructor(socket: Socket, vmId?: string) {
    this.#socket = socket;
    this.#vmId = vmId;
    this.#greeting = new Promise<void>((resolve, reject) => {
      this.#greeted = { resolve, reject };
    });
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => this.#onData(chunk));
    socket.on("error", (err) =>
      this.#fail(new VmmError(`QMP connection error: ${err.message}`, vmId)),
    );
    socket.on("close", () =>
      this.#fail(new VmmError("QMP connection closed (QEMU exited?)", vmId)),
    );
  }

  /** Connects, waits for the greeting and leaves capabilities negotiation mode. */
  static async connect(path: string, vmId?: string, timeoutMs = 10_000): Promise<QmpClient> {
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
    const client = new QmpClient(socket, vmId);
    await client.#greeting;
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
      this.#pending.set(id, { command, resolve: resolve as (v: unknown) => void, reject });
      this.#socket.write(`${message}\n`);
    });
  }

  /** Resolves with the first event named `name` for which `match` holds. */
  waitForEvent(
    name: string,
    match: (event: QmpEvent) => boolean = () => true,
    timeoutMs = 30_000,
  ): Promise<QmpEvent> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#listeners.delete(listener);
        reject(
          new VmmError(`timed out after ${timeoutMs} ms waiting for QMP event ${name}`, this.#vmId),
        );
      }, timeoutMs);
      const listener = (event: QmpEvent) => {
        if (event.event !== name || !match(event)) return;
        clearTimeout(timer);
        this.#listeners.delete(listener);
        resolve(event);
      };
      this.#listeners.add(listener);
    });
  }

  onEvent(listener: (event: QmpEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  close(): void {
    this.#socket.destroy();
  }

  #onData(chunk: string): void {
    this.#buffer += chunk;
    for (;;) {
      const newline = this.#buffer.indexOf("\n");
      if (newline < 0) return;
      const line = this.#buffer.slice(0, newline).trim();
      this.#buffer = this.#buffer.slice(newline + 1);
      if (line) this.#onMessage(line);
    }
  }

  #onMessage(line: string): void {
    let message: Record<string, unknown>;
    try {
      message = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    if ("QMP" in message) {
      this.#greeted?.resolve();
      return;
    }
    if (typeof message.event === "string") {
      const event = {
        event: message.event,
        data: message.data as Record<string, unknown> | undefined,
      };
      for (const listener of [...this.#listeners]) listener(event);
      return;
    }
    const pending = typeof message.id === "number" ? this.#pending.get(message.id) : undefined;
    if (!pending) return;
    this.#pending.delete(message.id as number);
    if ("error" in message) {
      const error = message.error as { class?: string; desc?: string };
      pending.reject(
        new QmpError(pending.command, error.class ?? "GenericError", error.desc ?? "", this.#vmId),
      );
    } else {
      pending.resolve(message.return);
    }
  }

  #fail(err: Error): void {
    if (this.#closed) return;
    this.#closed = err;
    this.#greeted?.reject(err);
    for (const pending of this.#pending.values()) pending.reject(err);
    this.#pending.clear();
  }
}
