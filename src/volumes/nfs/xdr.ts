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

export class XdrWriter {
  readonly #chunks: Buffer[] = [];
  #length = 0;

  get length(): number {
    return this.#length;
  }

  u32(value: number): this {
    const b = Buffer.allocUnsafe(4);
    b.writeUInt32BE(value >>> 0);
    return this.#push(b);
  }

  u64(value: bigint | number): this {
    const b = Buffer.allocUnsafe(8);
    b.writeBigUInt64BE(BigInt.asUintN(64, BigInt(value)));
    return this.#push(b);
  }

  bool(value: boolean): this {
    return this.u32(value ? 1 : 0);
  }

  fixed(bytes: Buffer): this {
    this.#push(bytes);
    const pad = (4 - (bytes.length % 4)) % 4;
    return pad === 0 ? this : this.#push(Buffer.alloc(pad));
  }

  opaque(bytes: Buffer): this {
    return this.u32(bytes.length).fixed(bytes);
  }

  string(value: string): this {
    return this.opaque(Buffer.from(value, "utf8"));
  }

  /** Appends another writer's bytes. */
  append(other: XdrWriter): this {
    for (const chunk of other.#chunks) this.#push(chunk);
    return this;
  }

  toBuffer(): Buffer {
    return Buffer.concat(this.#chunks, this.#length);
  }

  #push(bytes: Buffer): this {
    this.#chunks.push(bytes);
    this.#length += bytes.length;
    return this;
  }
}
