import { Transform, type TransformCallback } from "node:stream";
import { createGunzip } from "node:zlib";
import { Decompress } from "fzstd";
import { WarrenError } from "../shared/index.js";
import type { LayerCompression } from "./manifest.js";

const GZIP_MAGIC = [0x1f, 0x8b];
const ZSTD_MAGIC = [0x28, 0xb5, 0x2f, 0xfd];

/**
 * The compression of a layer from its first bytes. The bytes win over the media type: some
 * registries and tools label zstd or plain layers as gzip, and the content is what we unpack.
 */
export function sniffCompression(head: Uint8Array): LayerCompression {
  const starts = (magic: number[]) => magic.every((byte, i) => head[i] === byte);
  if (starts(GZIP_MAGIC)) return "gzip";
  if (starts(ZSTD_MAGIC)) return "zstd";
  return "none";
}

/**
 * zstd decompression as a stream. Node 20's zlib has no zstd (22.15 does), so this wraps
 * fzstd, a pure-JS streaming decoder (no native build, no host binary).
 */
export class ZstdDecompressStream extends Transform {
  readonly #decoder: Decompress;

  constructor() {
    super();
    // A copy: fzstd may hand out views of its window, which later frames overwrite.
    this.#decoder = new Decompress((chunk) => {
      this.push(Buffer.from(chunk));
    });
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    try {
      this.#decoder.push(new Uint8Array(chunk));
      callback();
    } catch (err) {
      callback(new WarrenError("image_invalid", `zstd layer: ${(err as Error).message}`));
    }
  }

  override _flush(callback: TransformCallback): void {
    try {
      this.#decoder.push(new Uint8Array(0), true);
      callback();
    } catch (err) {
      callback(new WarrenError("image_invalid", `zstd layer: ${(err as Error).message}`));
    }
  }
}

/** A transform that turns a layer blob of this compression into a tar stream. */
export function decompressor(compression: LayerCompression): Transform | undefined {
  switch (compression) {
    case "gzip":
      return createGunzip();
    case "zstd":
      return new ZstdDecompressStream();
    case "none":
      return undefined;
  }
}
