import type { Readable } from "node:stream";

/** Splits a stream into lines, none longer than `max` bytes. */
export class LineReader {
  onLine: (line: string) => void = () => {};
  onOverflow: () => void = () => {};
  #parts: Buffer[] = [];
  #size = 0;
  readonly #stream: Readable;

  constructor(stream: Readable, max: number) {
    this.#stream = stream;
    stream.on("data", (chunk: Buffer) => {
      let start = 0;
      for (let nl = chunk.indexOf(10); nl !== -1; nl = chunk.indexOf(10, start)) {
        this.#parts.push(chunk.subarray(start, nl));
        const line = Buffer.concat(this.#parts).toString("utf8");
        this.#parts = [];
        this.#size = 0;
        start = nl + 1;
        this.onLine(line);
      }
      if (start < chunk.length) {
        this.#parts.push(chunk.subarray(start));
        this.#size += chunk.length - start;
        if (this.#size > max) {
          this.#parts = [];
          this.#size = 0;
          stream.destroy();
          this.onOverflow();
        }
      }
    });
  }

  pause(): void {
    this.#stream.pause();
  }

  resume(): void {
    this.#stream.resume();
  }
}
