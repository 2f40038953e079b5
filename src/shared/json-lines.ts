import type { Socket } from "node:net";

/**
 * Newline-delimited JSON over a stream socket, bounded: a line longer than `maxLineBytes`
 * (newline excluded) is never buffered whole — `onTooLong` is told and the socket destroyed.
 * What a line holds is the caller's to check (`onValue` gets the parsed value, or
 * `onBadLine` the text that is no JSON). Writes are bounded too: a peer that stops reading
 * while more than `maxPendingBytes` wait is cut off rather than buffered without end.
 */
export interface JsonLinesOptions {
  readonly maxLineBytes: number;
  readonly maxPendingBytes?: number;
  onValue(value: unknown): void;
  onBadLine?(text: string): void;
  onTooLong?(): void;
}

const NEWLINE = 0x0a;
const DEFAULT_MAX_PENDING_BYTES = 16 * 1024 * 1024;

export class JsonLines {
  readonly #socket: Socket;
  readonly #o: JsonLinesOptions;
  #parts: Buffer[] = [];
  #length = 0;

  constructor(socket: Socket, options: JsonLinesOptions) {
    this.#socket = socket;
    this.#o = options;
    socket.on("data", (chunk: Buffer) => this.#take(chunk));
  }

  /** Sends one value as a line; false (and the socket destroyed) past the write bound. */
  send(value: unknown): boolean {
    const socket = this.#socket;
    if (socket.destroyed || !socket.writable) return false;
    if (socket.writableLength > (this.#o.maxPendingBytes ?? DEFAULT_MAX_PENDING_BYTES)) {
      socket.destroy(new Error("the peer does not read what it is sent"));
      return false;
    }
    socket.write(`${JSON.stringify(value)}\n`);
    return true;
  }

  #take(chunk: Buffer): void {
    let start = 0;
    for (;;) {
      const end = chunk.indexOf(NEWLINE, start);
      if (end < 0) break;
      const piece = chunk.subarray(start, end);
      start = end + 1;
      if (!this.#append(piece)) return;
      const line = Buffer.concat(this.#parts, this.#length);
      this.#parts = [];
      this.#length = 0;
      this.#line(line.toString("utf8"));
      if (this.#socket.destroyed) return;
    }
    if (start < chunk.length) this.#append(chunk.subarray(start));
  }

  /** Adds to the line being read; false once it is too long (the socket is destroyed). */
  #append(piece: Buffer): boolean {
    if (this.#length + piece.length > this.#o.maxLineBytes) {
      this.#parts = [];
      this.#length = 0;
      this.#o.onTooLong?.();
      this.#socket.destroy(new Error(`a line longer than ${this.#o.maxLineBytes} bytes`));
      return false;
    }
    if (piece.length > 0) {
      this.#parts.push(Buffer.from(piece));
      this.#length += piece.length;
    }
    return true;
  }

  #line(text: string): void {
    if (text.trim() === "") return;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      this.#o.onBadLine?.(text.slice(0, 200));
      return;
    }
    this.#o.onValue(value);
  }
}
