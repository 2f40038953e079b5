import { PassThrough, type Readable } from "node:stream";
import { Pack, Parser, type ReadEntry } from "tar";
import { WarrenError } from "../shared/index.js";

/**
 * A COPY step's uploaded archive made safe to unpack in order: the SDK lists a symlinked
 * directory both as the link and as the files seen through it, and unpacking those files
 * would write through (or fail on) the link. Entries below a symlink in the same archive
 * are dropped (the link keeps them reachable). Returns a plain tar; gzip is read as sent.
 *
 * Streamed in two passes over `open()` (each call a new stream from the archive's start):
 * the first lists its links and paths, the second is the returned stream, made as it is
 * read. Memory holds the archive's list of paths, never its bytes (uploads reach GiBs).
 */
export async function linkSafeArchive(open: () => Readable): Promise<Readable> {
  /** Symlink path → its target. */
  const links = new Map<string, string>();
  const paths: { path: string; type: string }[] = [];
  await parse(open(), (entry) => {
    const path = trimSlashes(entry.path);
    if (entry.type === "SymbolicLink") links.set(path, entry.linkpath ?? "");
    paths.push({ path, type: entry.type });
    entry.resume();
  });
  const underLink = (path: string) => {
    const parts = trimSlashes(path).split("/");
    return parts.some((_, i) => i < parts.length - 1 && links.has(parts.slice(0, i + 1).join("/")));
  };
  // Paths the archive holds as themselves; a file seen only through a link (GNU tar stores
  // the data there and hard-links the real path to it) moves to its real path instead.
  const direct = new Set(
    paths.filter((p) => p.type !== "Link" && !underLink(p.path)).map((p) => p.path),
  );
  const emitted = new Set<string>();
  const pack = new Pack({ portable: true });
  const out = new PassThrough();
  const source = open();
  const fail = (err: unknown) => {
    source.destroy();
    out.destroy(notATar(err));
  };
  pack.on("error", fail);
  // Minipass's pipe waits for the destination's drain: the source is read as `out` is.
  pack.pipe(out);
  // The reader went away (an upload failed or was aborted): stop reading the archive.
  out.on("close", () => source.destroy());
  const rename = (entry: ReadEntry, to: string, field: "path" | "linkpath") => {
    entry[field] = to;
    entry.header[field] = to;
  };
  const parser = new Parser({
    strict: true,
    onReadEntry: (entry) => {
      let path = trimSlashes(entry.path);
      if (underLink(path)) {
        const real = resolveThroughLinks(path, links);
        if (real === undefined || direct.has(real) || emitted.has(real) || entry.type === "Link") {
          entry.resume();
          return;
        }
        rename(entry, real, "path");
        path = real;
      }
      if (entry.type === "Link" && entry.linkpath) {
        const target = underLink(entry.linkpath)
          ? resolveThroughLinks(entry.linkpath, links)
          : trimSlashes(entry.linkpath);
        // Dangling, or itself: its data is already at this path.
        if (target === undefined || target === path) {
          entry.resume();
          return;
        }
        rename(entry, target, "linkpath");
      }
      emitted.add(path);
      pack.add(entry);
    },
  });
  parser.on("error", fail);
  parser.on("end", () => pack.end());
  source.on("error", fail);
  source.pipe(parser);
  return out;
}

/** Reads `source` through tar's parser to its end, each entry to `onEntry`. */
function parse(source: Readable, onEntry: (entry: ReadEntry) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const parser = new Parser({ strict: true, onReadEntry: onEntry });
    const fail = (err: unknown) => {
      source.destroy();
      reject(notATar(err));
    };
    parser.on("error", fail);
    parser.on("end", () => resolve());
    source.on("error", fail);
    source.pipe(parser);
  });
}

function notATar(err: unknown): WarrenError {
  if (err instanceof WarrenError) return err;
  const detail = err instanceof Error ? err.message : String(err);
  return new WarrenError("build_invalid", `the uploaded files are not a tar archive: ${detail}`);
}

/** `path` with its symlinked directories replaced by their targets (inside the archive only). */
function resolveThroughLinks(path: string, links: ReadonlyMap<string, string>): string | undefined {
  let parts = trimSlashes(path).split("/");
  for (let hops = 0; hops < 40; hops++) {
    const i = parts.findIndex(
      (_, j) => j < parts.length - 1 && links.has(parts.slice(0, j + 1).join("/")),
    );
    if (i < 0) return parts.join("/");
    const target = links.get(parts.slice(0, i + 1).join("/")) ?? "";
    if (target.startsWith("/")) return undefined;
    const joined = [...parts.slice(0, i), ...target.split("/")];
    const normal: string[] = [];
    for (const part of joined) {
      if (part === "" || part === ".") continue;
      if (part === "..") {
        if (normal.pop() === undefined) return undefined;
      } else normal.push(part);
    }
    parts = [...normal, ...parts.slice(i + 1)];
  }
  return undefined;
}

function trimSlashes(path: string): string {
  return path.replace(/^\.\//, "").replace(/\/+$/, "");
}
