import { Header } from "tar";

/** One entry of a hand-made tar archive (tests build hostile layers byte by byte). */
export interface TarEntry {
  readonly path: string;
  readonly type?: "File" | "Directory" | "SymbolicLink" | "Link" | "CharacterDevice" | "FIFO";
  readonly content?: string | Buffer;
  readonly mode?: number;
  readonly uid?: number;
  readonly gid?: number;
  readonly linkpath?: string;
}

/** A tar archive of these entries, in this order (no pax headers: short paths only). */
export function makeTar(entries: readonly TarEntry[]): Buffer {
  const blocks: Buffer[] = [];
  for (const entry of entries) {
    const type = entry.type ?? "File";
    const body = type === "File" ? Buffer.from(entry.content ?? "") : Buffer.alloc(0);
    const header = new Header({
      path: entry.path,
      type,
      mode: entry.mode ?? (type === "Directory" ? 0o755 : 0o644),
      uid: entry.uid ?? 0,
      gid: entry.gid ?? 0,
      size: body.length,
      mtime: new Date(1_700_000_000_000),
      ...(entry.linkpath === undefined ? {} : { linkpath: entry.linkpath }),
    });
    const block = Buffer.alloc(512);
    header.encode(block, 0);
    blocks.push(block, body, Buffer.alloc((512 - (body.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

/**
 * A zstd-compressed tar holding `etc/zstd-layer` ("from a zstd layer\n"), made once with
 * `makeTar` and `zstd -19`: the unit tier runs no host tools, and fzstd only decodes.
 */
export const ZSTD_TAR_FIXTURE = Buffer.from(
  "KLUv/QRozQIAsgQPEaDtBvzjX7Gqxm65ca79rBEyC1jJWBmxe5DtvxDJOPfL5Zgxvn//nCalxzIh/5e7zf+Fi6IWlIxVJLkCCQDquR8bEEKSgAKwQQCBdABu6i4CcB0ygTomaWlI",
  "base64",
);
