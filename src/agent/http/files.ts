import { createReadStream } from "node:fs";
import { open, stat } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { basename } from "node:path";
import { PassThrough, Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip, createGzip, constants as zlib } from "node:zlib";
import busboy from "busboy";
import { toWarrenError, WarrenError } from "../../shared/index.js";
import { ACCESS_TOKEN_HEADER, type FileOperation, requireFileAccess } from "../auth.js";
import { writeMetadata } from "../filesystem/metadata.js";
import { makeOwnedParentDirs } from "../owned-dirs.js";
import { resolvePath } from "../paths.js";
import type { AgentState } from "../state.js";
import { lookupUser, type UserAccount } from "../users.js";
import { inlineDisposition } from "./content-disposition.js";
import { sendError, sendJson } from "./respond.js";

const METADATA_HEADER = "x-metadata-";

interface FileRequest {
  readonly user: UserAccount;
  readonly rawPath: string | null;
}

function authorize(
  state: AgentState,
  req: IncomingMessage,
  url: URL,
  operation: FileOperation,
): FileRequest {
  const q = url.searchParams;
  const rawPath = q.get("path");
  const username = q.get("username") ?? undefined;
  requireFileAccess(state, {
    token: req.headers[ACCESS_TOKEN_HEADER] as string | undefined,
    path: rawPath ?? "",
    username,
    signature: q.get("signature") ?? undefined,
    signatureExpiration: q.get("signature_expiration") ?? undefined,
    operation,
  });
  const name = username ?? state.defaultUser;
  try {
    return { user: lookupUser(name), rawPath };
  } catch {
    throw new WarrenError(
      "unauthenticated",
      `error looking up user '${name}': user: unknown user ${name}`,
    );
  }
}

/**
 * Compresses only when gzip is the one coding the client names (the SDK's `gzip: true` sends
 * exactly `gzip`). fetch() adds `gzip, deflate` to every request on its own; compressing for
 * those would spend the guest's CPU, its scarcest resource, to shorten a local virtio hop.
 */
function wantsGzip(header: string | undefined): boolean {
  if (!header) return false;
  const codings = header
    .split(",")
    .map((part) => part.trim().split(";"))
    .filter(([, ...params]) => !params.some((p) => /^\s*q=0(\.0*)?\s*$/.test(p)))
    .map(([coding]) => coding?.trim().toLowerCase())
    .filter((coding) => coding && coding !== "identity");
  return codings.length === 1 && codings[0] === "gzip";
}

/** Parses a single `bytes=a-b` range; undefined for none, "invalid" when unsatisfiable. */
function parseRange(
  header: string | undefined,
  size: number,
): { start: number; end: number } | "invalid" | undefined {
  if (!header) return undefined;
  const match = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!match) return undefined; // multi-range or unknown unit: serve the whole file
  const [, from = "", to = ""] = match;
  let start: number;
  let end: number;
  if (from === "") {
    if (to === "") return "invalid";
    start = Math.max(size - Number(to), 0);
    end = size - 1;
  } else {
    start = Number(from);
    end = to === "" ? size - 1 : Math.min(Number(to), size - 1);
  }
  return start > end || start >= size ? "invalid" : { start, end };
}

/** GET /files: the file's bytes, gzip-encoded when asked, byte ranges supported. */
export async function downloadFile(
  state: AgentState,
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
) {
  const { user, rawPath } = authorize(state, req, url, "read");
  const path = resolvePath(rawPath ?? "", user, state.defaultWorkdir);
  const info = await stat(path).catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") throw new WarrenError("not_found", `path '${path}' does not exist`);
    throw toWarrenError(err, `cannot read '${path}'`);
  });
  if (info.isDirectory())
    throw new WarrenError("invalid_argument", `path '${path}' is a directory`);
  const headers: Record<string, string | number> = {
    "Content-Type": "application/octet-stream",
    "Content-Disposition": inlineDisposition(basename(path)),
    "Last-Modified": info.mtime.toUTCString(),
    "Accept-Ranges": "bytes",
    Vary: "Accept-Encoding",
  };
  const range = parseRange(req.headers.range, info.size);
  if (range === "invalid") {
    res.writeHead(416, { "Content-Range": `bytes */${info.size}` });
    res.end();
    return;
  }
  let body: Readable;
  if (range) {
    res.writeHead(206, {
      ...headers,
      "Content-Range": `bytes ${range.start}-${range.end}/${info.size}`,
      "Content-Length": range.end - range.start + 1,
    });
    body = createReadStream(path, { start: range.start, end: range.end });
  } else if (wantsGzip(req.headers["accept-encoding"]) && info.size > 0) {
    res.writeHead(200, { ...headers, "Content-Encoding": "gzip" });
    // Speed over ratio: the guest CPU is the scarce resource.
    body = createReadStream(path).pipe(createGzip({ level: zlib.Z_BEST_SPEED }));
  } else if (info.size === 0 && info.isFile()) {
    // procfs and sysfs files stat as empty and are not: read to EOF, with no length announced.
    res.writeHead(200, headers);
    body = createReadStream(path);
  } else {
    res.writeHead(200, { ...headers, "Content-Length": info.size });
    // Never more than announced: a file that grew meanwhile would otherwise spill bytes past
    // the response into the connection. Devices and FIFOs stat as empty: nothing is read.
    body = info.size === 0 ? Readable.from([]) : createReadStream(path, { end: info.size - 1 });
  }
  if (req.method === "HEAD") {
    body.destroy();
    res.end();
    return;
  }
  await pipeline(body, res);
}

function metadataFrom(req: IncomingMessage): Record<string, string> {
  const metadata: Record<string, string> = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (name.startsWith(METADATA_HEADER) && typeof value === "string") {
      metadata[name.slice(METADATA_HEADER.length)] = value;
    }
  }
  return metadata;
}

interface WrittenFile {
  path: string;
  name: string;
  type: "file";
  metadata?: Record<string, string>;
}

/**
 * Writes one upload in envd's order of operations: open with O_TRUNC (CREATE or WRITE),
 * chown to the user (CHMOD), then the bytes (WRITE); watchers see exactly these events.
 */
async function writeFile(
  path: string,
  data: Readable,
  user: UserAccount,
  metadata: Record<string, string>,
): Promise<WrittenFile> {
  const existing = await stat(path).catch(() => undefined);
  if (existing?.isDirectory())
    throw new WarrenError("invalid_argument", `path is a directory: ${path}`);
  try {
    await makeOwnedParentDirs(path, user);
  } catch (err) {
    throw toWarrenError(err, "error ensuring directories");
  }
  const handle = await open(path, "w", 0o666);
  try {
    await handle.chown(user.uid, user.gid);
    for await (const chunk of data) await handle.write(chunk as Buffer);
  } catch (err) {
    const error = toWarrenError(err, `cannot write '${path}'`);
    if (error.kind === "insufficient_storage")
      throw new WarrenError(error.kind, "not enough disk space available");
    throw error;
  } finally {
    await handle.close();
  }
  await writeMetadata(path, metadata);
  const written: WrittenFile = { path, name: basename(path), type: "file" };
  if (Object.keys(metadata).length > 0) written.metadata = metadata;
  return written;
}

function decodedBody(req: IncomingMessage): Readable {
  const encoding = (req.headers["content-encoding"] ?? "identity").toLowerCase();
  if (encoding === "gzip") {
    // A body that is not gzip is the client's mistake: 400, not the 500 zlib's error became.
    const gunzip = createGunzip();
    const decoded = new PassThrough();
    gunzip.on("error", (err) =>
      decoded.destroy(
        new WarrenError("invalid_argument", `error decompressing request body: ${err.message}`),
      ),
    );
    // Readers see the error through their own listeners; an upload refused before its body
    // is read (a wrong content type) has none, and an unhandled 'error' would end envd.
    decoded.on("error", () => {});
    return req.pipe(gunzip).pipe(decoded);
  }
  if (encoding === "identity") return req;
  throw new WarrenError("invalid_argument", `unsupported Content-Encoding '${encoding}'`);
}

/** A malformed or truncated form is the client's mistake: 400, never a 500. */
function formError(err: unknown): WarrenError {
  if (err instanceof WarrenError) return err;
  const detail = err instanceof Error ? err.message : String(err);
  return new WarrenError("invalid_argument", `error parsing multipart form: ${detail}`, {
    cause: err,
  });
}

/** Text parts (FormData strings, no filename) may be up to this large. */
const MAX_TEXT_PART_BYTES = 64 * 1024 * 1024;

/**
 * Writes every part named `file`, one after another, and answers in request order. A
 * failed part stops the writing; the rest of the body is read and discarded so the client
 * gets its error response, and nothing is left half-handled.
 */
function uploadMultipart(
  body: Readable,
  req: IncomingMessage,
  destination: (filename: string | undefined) => string,
  write: (path: string, data: Readable) => Promise<WrittenFile>,
): Promise<WrittenFile[]> {
  return new Promise((resolve, reject) => {
    const written: WrittenFile[] = [];
    const seen = new Set<string>();
    let chain = Promise.resolve();
    let failure: unknown;
    let settled = false;
    const settle = () => {
      if (settled) return;
      settled = true;
      chain.then(() => (failure === undefined ? resolve(written) : reject(failure)));
    };
    const fail = (err: unknown) => {
      failure ??= err;
    };
    const enqueue = (filename: string | undefined, data: Readable) => {
      if (failure !== undefined) {
        data.resume();
        return;
      }
      let path: string;
      try {
        path = destination(filename);
        if (seen.has(path)) {
          throw new WarrenError(
            "invalid_argument",
            `you cannot upload multiple files to the same path '${path}' in one upload request`,
          );
        }
        seen.add(path);
      } catch (err) {
        fail(err);
        data.resume();
        return;
      }
      chain = chain
        .then(async () => {
          if (failure !== undefined) {
            data.resume();
            return;
          }
          written.push(await write(path, data));
        })
        .catch((err: unknown) => {
          fail(err);
          data.resume();
        });
    };

    let parser: busboy.Busboy;
    try {
      // preservePath keeps the directories in a part's filename: it is the destination.
      parser = busboy({
        headers: req.headers,
        preservePath: true,
        limits: { fieldSize: MAX_TEXT_PART_BYTES },
      });
    } catch (err) {
      reject(formError(err));
      return;
    }
    parser.on("file", (field, stream, info) => {
      // A part skipped, or waiting its turn, has no reader: without a listener, the error
      // busboy emits on it when the form is cut short would be unhandled and end envd.
      stream.on("error", (err) => fail(formError(err)));
      if (field === "file") enqueue(info.filename, stream);
      else stream.resume();
    });
    // A FormData string (no filename) arrives as a field: it is a file too when named `file`.
    parser.on("field", (field, value: string) => {
      if (field === "file") enqueue(undefined, Readable.from([Buffer.from(value, "utf8")]));
    });
    parser.on("close", settle);
    parser.on("error", (err) => {
      fail(formError(err));
      body.unpipe(parser);
      body.resume();
      settle();
    });
    body.on("error", (err) => {
      fail(toWarrenError(err, "error decompressing request body"));
      settle();
    });
    body.pipe(parser);
  });
}

/** POST /files: multipart (one part per file) or a raw octet-stream body. */
export async function uploadFiles(
  state: AgentState,
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
) {
  const { user, rawPath } = authorize(state, req, url, "write");
  const metadata = metadataFrom(req);
  const resolve = (path: string) => resolvePath(path, user, state.defaultWorkdir);
  const write = (path: string, data: Readable) => writeFile(path, data, user, metadata);
  const contentType = (req.headers["content-type"] ?? "").toLowerCase();
  try {
    const body = decodedBody(req);
    if (contentType.startsWith("multipart/form-data")) {
      const files = await uploadMultipart(
        body,
        req,
        (filename) => {
          if (rawPath) return resolve(rawPath);
          if (!filename) {
            throw new WarrenError(
              "invalid_argument",
              "error getting multipart custom part file name: filename not found in Content-Disposition header",
            );
          }
          return resolve(filename);
        },
        write,
      );
      logUpload(state, files);
      sendJson(res, 200, files);
    } else if (contentType.startsWith("application/octet-stream")) {
      if (!rawPath)
        throw new WarrenError(
          "invalid_argument",
          "the path query parameter is required for octet-stream uploads",
        );
      const written = [await write(resolve(rawPath), body)];
      logUpload(state, written);
      sendJson(res, 200, written);
    } else {
      throw new WarrenError(
        "invalid_argument",
        "upload with Content-Type multipart/form-data (a part named 'file' per file) or application/octet-stream",
      );
    }
  } catch (err) {
    req.resume();
    sendError(res, err);
  }
}

function logUpload(state: AgentState, files: readonly { path: string }[]): void {
  state.log.record("info", `upload: ${files.map((file) => file.path).join(", ")}`);
}
