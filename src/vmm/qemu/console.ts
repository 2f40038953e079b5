/**
 * The tail of a guest's serial console, kept in memory and bounded: a guest printing
 * without end costs a fixed amount of the server's memory and no disk.
 */
export class ConsoleTail {
  #chunks: Buffer[] = [];
  #bytes = 0;

  constructor(readonly limitBytes = 64 * 1024) {}

  append(chunk: Buffer): void {
    this.#chunks.push(chunk);
    this.#bytes += chunk.length;
    while (this.#bytes - (this.#chunks[0]?.length ?? 0) >= this.limitBytes) {
      this.#bytes -= this.#chunks.shift()?.length ?? 0;
    }
  }

  /** The last `limitBytes` (at most) of the console, as text. */
  text(): string {
    const all = Buffer.concat(this.#chunks);
    return all.subarray(Math.max(0, all.length - this.limitBytes)).toString("utf8");
  }
}
