import { Buffer } from "node:buffer";
import fs from "node:fs";
import process from "node:process";
import { setImmediate } from "node:timers";

// Taken at load, before output capture or user code replaces them.
const { writeSync } = fs;
const { stringify } = JSON;

/** The fd envd reads events from (kernels/PROTOCOL.md). */
const EVENTS_FD = 3;
/** Output is sent at least this often while a cell keeps writing (streaming callbacks). */
const OUTPUT_LATENCY_MS = 50;
/** Buffered output past this is sent at once. */
const OUTPUT_BATCH_CHARS = 64 * 1024;
/** One stdout/stderr event carries at most this much text (envd bounds a line at 64 MiB). */
const MAX_TEXT_CHARS = 1024 * 1024;

export type Stream = "stdout" | "stderr";

export type Event =
  | { readonly type: "ready" }
  | { readonly type: "execution_count"; readonly id: string; readonly count: number }
  | {
      readonly type: "result";
      readonly id: string;
      readonly main: boolean;
      readonly data: Readonly<Record<string, unknown>>;
    }
  | {
      readonly type: "error";
      readonly id: string;
      readonly name: string;
      readonly value: string;
      readonly traceback: string;
    }
  | { readonly type: "done"; readonly id: string };

/**
 * Writes events to fd 3, one JSON line each, synchronously: a cell's output and its `done`
 * leave in the order they happened, and a slow reader slows the kernel down rather than
 * filling its memory. Output is batched a little (many small writes make few events) but
 * never held past OUTPUT_LATENCY_MS of further writing, nor past the next other event.
 */
export class EventWriter {
  #pending: { id: string; stream: Stream; text: string }[] = [];
  #pendingChars = 0;
  #since = 0;
  #scheduled = false;

  constructor(readonly fd = EVENTS_FD) {}

  emit(event: Event): void {
    this.flush();
    this.#write(`${stringify(event)}\n`);
  }

  output(id: string, stream: Stream, text: string): void {
    if (text === "") return;
    const last = this.#pending.at(-1);
    if (last && last.id === id && last.stream === stream) last.text += text;
    else this.#pending.push({ id, stream, text });
    if (this.#pendingChars === 0) this.#since = Date.now();
    this.#pendingChars += text.length;
    if (this.#pendingChars >= OUTPUT_BATCH_CHARS || Date.now() - this.#since >= OUTPUT_LATENCY_MS) {
      this.flush();
    } else if (!this.#scheduled) {
      this.#scheduled = true;
      setImmediate(() => {
        this.#scheduled = false;
        this.flush();
      }).unref();
    }
  }

  flush(): void {
    // Taken before writing: a flush re-entered (an interrupt) sees an empty batch.
    const pending = this.#pending;
    this.#pending = [];
    this.#pendingChars = 0;
    for (const { id, stream, text } of pending) {
      for (let at = 0; at < text.length; at += MAX_TEXT_CHARS) {
        const part = text.slice(at, at + MAX_TEXT_CHARS);
        this.#write(`${stringify({ type: stream, id, text: part })}\n`);
      }
    }
  }

  #write(line: string): void {
    const bytes = Buffer.from(line, "utf8");
    let at = 0;
    while (at < bytes.length) {
      try {
        at += writeSync(this.fd, bytes, at);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        // envd is gone: nobody is left to run code for.
        if (code === "EPIPE") process.exit(0);
        // The fd may be non-blocking (whoever created it chose): wait for room and go on.
        if (code !== "EAGAIN") throw err;
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
      }
    }
  }
}
