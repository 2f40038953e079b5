/**
 * XDR (RFC 4506), the encoding ONC RPC and NFS speak: big-endian 4-byte units, variable
 * data padded to 4 bytes. The reader bounds every length it is given (a guest sends these).
 */

export class XdrError extends Error {
  override readonly name = "XdrError";
}

export class XdrReader {
  #offset = 0;

  constructor(readonly buffer: Buffer) {}

  get remaining(): number {
    return this.buffer.length - this.#offset;
  }

  u32(): number {
    this.#need(4);
    const value = this.buffer.readUInt32BE(this.#offset);
    this.#offset += 4;
    return value;
  }

  u64(): bigint {
    this.#need(8);
    const value = this.buffer.readBigUInt64BE(this.#offset);
    this.#offset += 8;
    return value;
  }

  bool(): boolean {
    return this.u32() !== 0;
  }

  /** Fixed-length opaque data (padded). */
  fixed(length: number): Buffer {
    const padded = (length + 3) & ~3;
    this.#need(padded);
    const bytes = this.buffer.subarray(this.#offset, this.#offset + length);
    this.#offset += padded;
    return bytes;
  }

  /** Variable-length opaque data, at most `max` bytes. */
  opaque(max: number): Buffer {
    const length = this.u32();
    if (length > max) throw new XdrError(`opaque of ${length} bytes, more than ${max}`);
    return this.fixed(length);
  }

  string(max: number): string {
    return this.opaque(max).toString("utf8");
  }

  #need(bytes: number): void {
    if (this.#offset + bytes > this.buffer.length) throw new XdrError("truncated XDR data");
  }
}

/** Payloads at least this long are kept by reference rather than copied (READ's data). */
const BY_REFERENCE_BYTES = 1024;
const BLOCK_BYTES = 4096;

/**
 * Builds XDR data into a few blocks (small items copied into 4 KiB blocks, large opaque data
 * kept by reference), so a reply of thousands of fields is a handful of buffers, not one per
 * field, and can go to the socket as they are (`segments`).
 */
export class XdrWriter {
  readonly #done: Buffer[] = [];
  #block: Buffer | undefined;
  #used = 0;
  #length = 0;

  get length(): number {
    return this.#length;
  }

  u32(value: number): this {
    this.#room(4).writeUInt32BE(value >>> 0, this.#used);
    return this.#advance(4);
  }

  u64(value: bigint | number): this {
    this.#room(8).writeBigUInt64BE(BigInt.asUintN(64, BigInt(value)), this.#used);
    return this.#advance(8);
  }

  bool(value: boolean): this {
    return this.u32(value ? 1 : 0);
  }

  fixed(bytes: Buffer): this {
    this.#put(bytes);
    const pad = (4 - (bytes.length % 4)) % 4;
    if (pad > 0) this.#room(pad).fill(0, this.#used, this.#used + pad);
    return pad > 0 ? this.#advance(pad) : this;
  }

  opaque(bytes: Buffer): this {
    return this.u32(bytes.length).fixed(bytes);
  }

  string(value: string): this {
    return this.opaque(Buffer.from(value, "utf8"));
  }

  /** Appends another writer's bytes. */
  append(other: XdrWriter): this {
    for (const segment of other.segments()) this.#put(segment);
    return this;
  }

  /** The bytes written, as the buffers that hold them (views: valid until more is written). */
  segments(): Buffer[] {
    const open = this.#block && this.#used > 0 ? [this.#block.subarray(0, this.#used)] : [];
    return [...this.#done, ...open];
  }

  toBuffer(): Buffer {
    return Buffer.concat(this.segments(), this.#length);
  }

  /** Bytes as they are (no padding): copied when small, kept by reference when large. */
  #put(bytes: Buffer): void {
    if (bytes.length < BY_REFERENCE_BYTES) {
      bytes.copy(this.#room(bytes.length), this.#used);
      this.#advance(bytes.length);
      return;
    }
    this.#seal();
    this.#done.push(bytes);
    this.#length += bytes.length;
  }

  /** The current block with `bytes` free at `#used`. */
  #room(bytes: number): Buffer {
    if (!this.#block || this.#used + bytes > this.#block.length) {
      this.#seal();
      this.#block = Buffer.allocUnsafe(Math.max(BLOCK_BYTES, bytes));
    }
    return this.#block;
  }

  #advance(bytes: number): this {
    this.#used += bytes;
    this.#length += bytes;
    return this;
  }

  /** Closes the current block: what follows goes into a new one, after what was pushed. */
  #seal(): void {
    if (this.#block && this.#used > 0) this.#done.push(this.#block.subarray(0, this.#used));
    this.#block = undefined;
    this.#used = 0;
  }
}
