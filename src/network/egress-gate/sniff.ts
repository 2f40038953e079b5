/**
 * The name a guest's new connection is for, from its first bytes: the TLS ClientHello's
 * server_name (SNI), or an HTTP/1 request's Host header. Pure: the caller reads bytes from
 * the guest (bounded) and asks again while the answer is `more`.
 */
export type Sniffed =
  /** The name the client asked for (as sent: not yet checked to be a host name). */
  | { readonly kind: "name"; readonly name: string; readonly by: "tls" | "http" }
  /** TLS or HTTP, but no name in it (no SNI, no Host). */
  | { readonly kind: "nameless" }
  /** Neither TLS nor HTTP: a protocol that names no host (SSH, a raw socket). */
  | { readonly kind: "other" }
  /** Could be either, cut short: read more (up to the caller's bound). */
  | { readonly kind: "more" };

/** Most bytes worth reading: a ClientHello is one record (≤ 16 KiB), a request head less. */
export const MAX_SNIFF_BYTES = 16 * 1024 + 5;

const MORE: Sniffed = { kind: "more" };
const OTHER: Sniffed = { kind: "other" };
const NAMELESS: Sniffed = { kind: "nameless" };

export function sniffName(head: Buffer): Sniffed {
  if (head.length === 0) return MORE;
  if (head[0] === 0x16) return sniffTls(head);
  return sniffHttp(head);
}

/** A TLS record of type handshake, holding a ClientHello: its server_name extension. */
function sniffTls(head: Buffer): Sniffed {
  if (head.length < 5) return MORE;
  if (head[1] !== 0x03) return OTHER; // TLS 1.x record versions are 3.x
  const recordLength = head.readUInt16BE(3);
  if (recordLength > 16 * 1024 + 2048) return OTHER;
  if (head.length < 5 + recordLength) return head.length >= MAX_SNIFF_BYTES ? OTHER : MORE;
  const hello = new Reader(head.subarray(5, 5 + recordLength));
  try {
    if (hello.u8() !== 0x01) return OTHER; // ClientHello
    const length = hello.u24();
    // A ClientHello split over several records: its start holds the extensions rarely; not read.
    if (length > hello.remaining) return NAMELESS;
    hello.skip(2 + 32); // legacy_version, random
    hello.skip(hello.u8()); // session id
    hello.skip(hello.u16()); // cipher suites
    hello.skip(hello.u8()); // compression methods
    if (hello.remaining === 0) return NAMELESS;
    const extensions = new Reader(hello.bytes(hello.u16()));
    while (extensions.remaining > 0) {
      const type = extensions.u16();
      const body = new Reader(extensions.bytes(extensions.u16()));
      if (type !== 0x0000) continue; // server_name
      const list = new Reader(body.bytes(body.u16()));
      while (list.remaining > 0) {
        const nameType = list.u8();
        const name = list.bytes(list.u16());
        if (nameType === 0) return { kind: "name", name: name.toString("latin1"), by: "tls" };
      }
    }
    return NAMELESS;
  } catch {
    return OTHER; // malformed: lengths past the record
  }
}

const METHOD = /^[A-Z]{3,10} \S+ HTTP\/1\.[01]\r\n/;

/** An HTTP/1 request head: its Host header (the port, if any, dropped). */
function sniffHttp(head: Buffer): Sniffed {
  const text = head.subarray(0, MAX_SNIFF_BYTES).toString("latin1");
  const firstLine = text.indexOf("\r\n");
  if (firstLine === -1) {
    // Still within what a request line could be, and all of it token characters so far.
    return text.length < 8192 &&
      /^[A-Z]{1,10}( \S*( H(T(T(P(\/(1(\.[01]?)?)?)?)?)?)?)?)?$/.test(text)
      ? MORE
      : OTHER;
  }
  if (!METHOD.test(text.slice(0, firstLine + 2))) return OTHER;
  const end = text.indexOf("\r\n\r\n");
  const headers = text.slice(firstLine + 2, end === -1 ? text.lastIndexOf("\r\n") : end);
  for (const line of headers.split("\r\n")) {
    const colon = line.indexOf(":");
    if (colon > 0 && line.slice(0, colon).trim().toLowerCase() === "host") {
      const value = line.slice(colon + 1).trim();
      return { kind: "name", name: value.replace(/:\d+$/, ""), by: "http" };
    }
  }
  if (end === -1) return text.length >= MAX_SNIFF_BYTES ? NAMELESS : MORE;
  return NAMELESS;
}

/** Reads big-endian fields off a buffer; throws RangeError past its end. */
class Reader {
  #at = 0;
  constructor(readonly buffer: Buffer) {}
  get remaining(): number {
    return this.buffer.length - this.#at;
  }
  u8(): number {
    return this.bytes(1)[0] as number;
  }
  u16(): number {
    return this.bytes(2).readUInt16BE(0);
  }
  u24(): number {
    const b = this.bytes(3);
    return ((b[0] as number) << 16) | b.readUInt16BE(1);
  }
  skip(n: number): void {
    this.bytes(n);
  }
  bytes(n: number): Buffer {
    if (n > this.remaining) throw new RangeError("past the end");
    const out = this.buffer.subarray(this.#at, this.#at + n);
    this.#at += n;
    return out;
  }
}
