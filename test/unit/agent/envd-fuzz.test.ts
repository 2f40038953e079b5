// Fuzz of envd (fast-check): its Connect services (process, filesystem) with random and
// mutated requests in the JSON and binary codecs, unary and streamed, with truncated,
// oversized and mis-flagged envelopes and wrong content types; its HTTP routes (/files,
// /init, /health, /envs, /metrics, unknown ones) with random queries, headers and bodies
// (multipart with traversal in file names, gzip junk, metadata headers); paths with
// traversal, NULs, `~`, odd unicode.
//
// envd is the bundle the guests run, started as a process of its own as `nobody` (so this
// test needs root, which the unit tier has on CI; it skips otherwise): whatever a request
// makes it do, it can only write where `nobody` may, and every path the fuzzer sends
// resolves inside the test's directory or somewhere `nobody` cannot write. Properties:
// every answer comes (within its deadline), REST ones are 2xx or `{code, message}` with
// code = status and no 5xx but 503/507; Connect ones are 2xx or a Connect error other than
// internal/unknown/data_loss (a handler that threw); envd still answers /health afterwards
// and exits cleanly on SIGTERM; then no process it started is left and nothing of
// `nobody`'s is left in the world-writable directories outside the test's own.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
} from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { Agent, request as httpRequest } from "node:http";
import { join, normalize, posix } from "node:path";
import { after, type TestContext, test } from "node:test";
import { gunzipSync, gzipSync } from "node:zlib";
import { freeLoopbackPort } from "../../helpers/free-port.js";
import {
  fc,
  fuzzParameters,
  headerName,
  headerValue,
  nastyJson,
  nastyString,
  percentEncode,
  reportCases,
} from "../../helpers/fuzz.js";

const RUNS = 300;
const ROOT_DIR = join(import.meta.dirname, "..", "..", "..");
const ENVD_BUNDLE = join(ROOT_DIR, "dist", "agent", "envd.mjs");
const TOKEN = "fuzz-token";
/** `nobody`: uid, gid, home. */
const NOBODY = { uid: 65534, gid: 65534, home: "/nonexistent" };
/** Where `nobody` may create files (find / -type d -perm -0002 on Debian). */
const WORLD_WRITABLE = ["/tmp", "/var/tmp", "/dev/shm", "/run/lock"];

const isRoot = process.getuid?.() === 0;
const hasNobody =
  isRoot &&
  readFileSync("/etc/passwd", "utf8")
    .split("\n")
    .some((line) => line.startsWith(`nobody:x:${NOBODY.uid}:`));

// ---- the test's directory: base (root's, 0755) / w (nobody's) / a / b / c / d / e / f ----

const DEPTH = 6;
const base = await mkdtemp("/tmp/warren-envd-fuzz-");
after(() => rm(base, { recursive: true, force: true }));
/** The default workdir and where most paths start; DEPTH levels below base/w. */
const work = join(base, "w", ..."abcdef".slice(0, DEPTH).split(""));
/** (Re)makes `work` and the directories above it up to base, `nobody`'s. */
function makeWork(): void {
  chmodSync(base, 0o755); // mkdtemp made it 0700: nobody could not even enter it
  rmSync(join(base, "w"), { recursive: true, force: true }); // what an earlier run left
  mkdirSync(work, { recursive: true });
  let dir = work;
  while (dir !== base) {
    chownSync(dir, NOBODY.uid, NOBODY.gid);
    dir = join(dir, "..");
  }
}

/** Where envd puts a request's path (src/agent/paths.ts, for `nobody` with workdir `work`). */
function resolved(path: string): string | undefined {
  if (path.includes("\0")) return undefined;
  if (path === "") return work;
  if (path === "~") return NOBODY.home;
  if (path.startsWith("~/")) return normalize(join(NOBODY.home, path.slice(2)));
  if (path.startsWith("~")) return undefined;
  return posix.isAbsolute(path) ? normalize(path) : normalize(join(NOBODY.home, path));
}

/** A path is sent only if it lands in the test's directory or where `nobody` cannot write. */
function safe(path: string): boolean {
  const at = resolved(path);
  if (at === undefined) return true;
  const inside = (dir: string) => at === dir || at.startsWith(`${dir}/`);
  return inside(base) || !WORLD_WRITABLE.some(inside);
}

const pathSegment = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom("x", "y", "dir", "file.txt", ".", "..", "", "é💩") },
  { weight: 2, arbitrary: fc.stringMatching(/^[^/\0]{1,20}$/) },
  { weight: 1, arbitrary: fc.constantFrom("a\u0000b", "x".repeat(300), " ", "\\", "%2e%2e") },
);

/** Mostly under `work` (with traversal that stays in base), else anything that is safe. */
const fuzzPath: fc.Arbitrary<string> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc
      .array(pathSegment, { maxLength: 4 })
      .map((parts) => [work, ...parts].join("/"))
      .filter(safe),
  },
  { weight: 1, arbitrary: fc.constantFrom(work, `${work}/`, `${work}//x/./`, base) },
  { weight: 2, arbitrary: nastyString.filter(safe) },
  {
    weight: 1,
    arbitrary: fc.constantFrom("", "~", "~/x", "~root/x", "/", "/etc/passwd", "/proc/self/environ"),
  },
);

// ---- requests ----

interface FuzzRequest {
  readonly kind: "rest" | "unary" | "stream";
  readonly method: string;
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly body?: Buffer;
}

const PROCESS = "/process.Process/";
const FILESYSTEM = "/filesystem.Filesystem/";
const UNARY = [
  `${PROCESS}List`,
  `${PROCESS}Update`,
  `${PROCESS}SendInput`,
  `${PROCESS}SendSignal`,
  `${PROCESS}CloseStdin`,
  `${FILESYSTEM}Stat`,
  `${FILESYSTEM}MakeDir`,
  `${FILESYSTEM}Move`,
  `${FILESYSTEM}ListDir`,
  `${FILESYSTEM}Remove`,
  `${FILESYSTEM}CreateWatcher`,
  `${FILESYSTEM}GetWatcherEvents`,
  `${FILESYSTEM}RemoveWatcher`,
];
const STREAMS = [`${PROCESS}Start`, `${PROCESS}Connect`, `${FILESYSTEM}WatchDir`];
const CLIENT_STREAMS = [`${PROCESS}StreamInput`];

/** A field's value: mostly the right shape, sometimes any JSON at all. */
const mutated = <T>(good: fc.Arbitrary<T>) =>
  fc.oneof({ weight: 4, arbitrary: good }, { weight: 1, arbitrary: nastyJson });

const selector = mutated(
  fc.oneof(
    fc.record({ pid: fc.oneof(fc.nat(70_000), fc.integer(), fc.constant(1)) }),
    fc.record({ tag: nastyString }),
    fc.constant({}),
  ),
);
const b64 = fc.uint8Array({ maxLength: 64 }).map((bytes) => Buffer.from(bytes).toString("base64"));
const cmd = fc.oneof(
  fc.constantFrom("/bin/true", "/bin/echo", "/bin/sleep", "/bin/cat", "/nonexistent", "true", ""),
  nastyString,
);
const processConfig = fc.record(
  {
    cmd: mutated(cmd),
    args: mutated(
      fc.array(fc.oneof(fc.constantFrom("0.1", "1", "1000", "-1", "--help"), nastyString), {
        maxLength: 4,
      }),
    ),
    envs: mutated(fc.dictionary(nastyString, nastyString, { maxKeys: 3 })),
    cwd: mutated(fuzzPath),
  },
  { requiredKeys: ["cmd"] },
);
const ptySize = mutated(
  fc.record({ size: fc.record({ cols: fc.nat(70_000), rows: fc.nat(70_000) }) }),
);

/** Request messages (proto3 JSON) per method, each field mutated now and then. */
const MESSAGES: Record<string, fc.Arbitrary<unknown>> = {
  List: fc.constant({}),
  Start: fc.record(
    {
      process: mutated(processConfig),
      pty: ptySize,
      tag: mutated(nastyString),
      stdin: mutated(fc.boolean()),
    },
    { requiredKeys: ["process"] },
  ),
  Connect: fc.record({ process: selector }),
  Update: fc.record({ process: selector, pty: ptySize }),
  SendInput: fc.record({
    process: selector,
    input: mutated(fc.oneof(fc.record({ stdin: b64 }), fc.record({ pty: b64 }))),
  }),
  StreamInput: fc.constant({}), // built as envelopes below
  SendSignal: fc.record({
    process: selector,
    signal: mutated(
      fc.constantFrom("SIGNAL_SIGTERM", "SIGNAL_SIGKILL", "SIGNAL_UNSPECIFIED", 9, 15, 2, 99),
    ),
  }),
  CloseStdin: fc.record({ process: selector }),
  Stat: fc.record({ path: mutated(fuzzPath) }),
  MakeDir: fc.record({ path: mutated(fuzzPath) }),
  Move: fc.record({ source: mutated(fuzzPath), destination: mutated(fuzzPath) }),
  ListDir: fc.record({ path: mutated(fuzzPath), depth: mutated(fc.nat(1_000_000)) }),
  Remove: fc.record({ path: mutated(fuzzPath) }),
  WatchDir: fc.record({
    path: mutated(fuzzPath),
    recursive: mutated(fc.boolean()),
    includeEntry: mutated(fc.boolean()),
  }),
  CreateWatcher: fc.record({ path: mutated(fuzzPath), recursive: mutated(fc.boolean()) }),
  GetWatcherEvents: fc.record({ watcherId: mutated(nastyString) }),
  RemoveWatcher: fc.record({ watcherId: mutated(nastyString) }),
};

/** A JSON message, unless a mutated field is not JSON at all (then its bytes are junk too). */
const messageBytes = (method: string) =>
  fc.oneof(
    {
      weight: 6,
      arbitrary: (MESSAGES[method] ?? fc.constant({})).map((m) =>
        Buffer.from(JSON.stringify(m) ?? "null"),
      ),
    },
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: 100 }).map((b) => Buffer.from(b)) },
    { weight: 1, arbitrary: fc.string({ maxLength: 30 }).map((s) => Buffer.from(s)) },
  );

/** A Connect envelope: flags, big-endian length, payload; the length may lie. */
function envelope(flags: number, payload: Buffer, declared = payload.length): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt8(flags & 0xff, 0);
  head.writeUInt32BE(declared >>> 0, 1);
  return Buffer.concat([head, payload]);
}

const envelopes = (method: string) =>
  fc
    .array(
      fc.record({
        flags: fc.oneof(
          { weight: 5, arbitrary: fc.constant(0) },
          { weight: 1, arbitrary: fc.nat(255) },
        ),
        payload: messageBytes(method),
        lie: fc.oneof(
          { weight: 6, arbitrary: fc.constant(0) },
          { weight: 1, arbitrary: fc.integer({ min: -5, max: 5 }) },
          { weight: 1, arbitrary: fc.constantFrom(0xffffffff, 0x7fffffff, 64 * 1024 * 1024) },
        ),
      }),
      { minLength: 0, maxLength: 3 },
    )
    .chain((parts) =>
      fc
        .oneof({ weight: 5, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.nat(8) })
        .map((cut) => {
          const whole = Buffer.concat(
            parts.map((p) => envelope(p.flags, p.payload, Math.max(0, p.payload.length + p.lie))),
          );
          // Sometimes the body stops mid-envelope.
          return cut === 0 ? whole : whole.subarray(0, Math.max(0, whole.length - cut));
        }),
    );

const streamInputBody = fc
  .array(
    fc.oneof(
      fc.record({ start: fc.record({ process: selector }) }),
      fc.record({
        data: fc.record({ input: fc.oneof(fc.record({ stdin: b64 }), fc.record({ pty: b64 })) }),
      }),
      fc.record({ keepalive: fc.constant({}) }),
      nastyJson,
    ),
    { maxLength: 4 },
  )
  .map((messages) =>
    Buffer.concat(messages.map((m) => envelope(0, Buffer.from(JSON.stringify(m) ?? "null")))),
  );

const commonHeaders = fc.record({
  token: fc.oneof(
    { weight: 8, arbitrary: fc.constant({ "x-access-token": TOKEN }) },
    { weight: 1, arbitrary: fc.constant({}) },
    { weight: 1, arbitrary: headerValue.map((v) => ({ "x-access-token": v })) },
  ),
  user: fc.oneof(
    { weight: 6, arbitrary: fc.constant({}) },
    {
      weight: 2,
      arbitrary: fc
        .constantFrom("nobody", "root", "nosuchuser", "", "nobody:pw", ":")
        .map((u) => ({ authorization: `Basic ${Buffer.from(`${u}:`).toString("base64")}` })),
    },
    { weight: 1, arbitrary: headerValue.map((v) => ({ authorization: v })) },
  ),
  extra: fc.dictionary(
    fc.oneof(
      headerName,
      fc.constantFrom(
        "connect-protocol-version",
        "connect-timeout-ms",
        "keepalive-ping-interval",
        "content-encoding",
        "range",
        "accept-encoding",
        "x-metadata-k",
      ),
    ),
    headerValue,
    { maxKeys: 2 },
  ),
});

const rpcContentType = (streaming: boolean) =>
  fc.oneof(
    {
      weight: 8,
      arbitrary: fc.constant(streaming ? "application/connect+json" : "application/json"),
    },
    {
      weight: 3,
      arbitrary: fc.constantFrom(
        streaming ? "application/connect+proto" : "application/proto",
        streaming ? "application/json" : "application/connect+json",
        "application/grpc",
        "application/grpc-web+proto",
        "text/plain",
        "",
        "application/json; charset=utf-16",
      ),
    },
    { weight: 1, arbitrary: headerValue },
  );

/** A deadline the stream must end by (it is the process's lifetime on Start), or junk. */
const timeoutHeader = fc.oneof(
  { weight: 8, arbitrary: fc.integer({ min: 50, max: 400 }).map(String) },
  { weight: 1, arbitrary: fc.constantFrom("0", "-1", "abc", "1.5", "99999999999", "") },
);

const rpcRequest: fc.Arbitrary<FuzzRequest> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.constantFrom(...UNARY).chain((path) =>
      fc
        .record({
          ct: rpcContentType(false),
          body: messageBytes(path.split("/")[2] as string),
          h: commonHeaders,
        })
        .map((r) => ({
          kind: "unary" as const,
          method: "POST",
          path,
          headers: { ...r.h.extra, ...r.h.token, ...r.h.user, "content-type": r.ct },
          body: r.body,
        })),
    ),
  },
  {
    weight: 2,
    arbitrary: fc.constantFrom(...STREAMS, ...CLIENT_STREAMS).chain((path) =>
      fc
        .record({
          ct: rpcContentType(true),
          body: CLIENT_STREAMS.includes(path)
            ? fc.oneof(streamInputBody, envelopes(path.split("/")[2] as string))
            : envelopes(path.split("/")[2] as string),
          timeout: timeoutHeader,
          h: commonHeaders,
        })
        .map((r) => ({
          kind: "stream" as const,
          method: "POST",
          path,
          headers: {
            ...r.h.extra,
            ...r.h.token,
            ...r.h.user,
            "content-type": r.ct,
            "connect-timeout-ms": r.timeout,
            // gRPC and gRPC-web read their deadline from here.
            "grpc-timeout": `${r.timeout}m`,
          },
          body: r.body,
        })),
    ),
  },
);

const multipartBody = fc
  .record({
    boundary: fc.constantFrom("b0undary", "x", "-".repeat(70)),
    parts: fc.array(
      fc.record({
        field: fc.constantFrom("file", "file", "other", ""),
        filename: fc.option(
          fuzzPath.map((p) => p.replace(/[\r\n"]/g, "_")),
          { freq: 5 },
        ),
        data: fc.uint8Array({ maxLength: 200 }),
      }),
      { maxLength: 3 },
    ),
    truncate: fc.boolean(),
  })
  .map(({ boundary, parts, truncate }) => {
    const chunks: Buffer[] = [];
    for (const part of parts) {
      const filename = part.filename === null ? "" : `; filename="${part.filename}"`;
      chunks.push(
        Buffer.from(
          `--${boundary}\r\nContent-Disposition: form-data; name="${part.field}"${filename}\r\n\r\n`,
        ),
        Buffer.from(part.data),
        Buffer.from("\r\n"),
      );
    }
    if (!truncate) chunks.push(Buffer.from(`--${boundary}--\r\n`));
    return {
      contentType: `multipart/form-data; boundary=${boundary}`,
      body: Buffer.concat(chunks),
    };
  });

const filesQuery = fc
  .record(
    {
      path: fuzzPath,
      username: fc.constantFrom("nobody", "root", "nosuchuser", ""),
      signature: fc.oneof(fc.constant("v1_x"), nastyString),
      signature_expiration: fc.oneof(fc.integer().map(String), nastyString),
    },
    { requiredKeys: [] },
  )
  .map((q) =>
    Object.entries(q)
      .map(([k, v]) => `${k}=${percentEncode(v)}`)
      .join("&"),
  );

/** /init bodies: the token stays TOKEN or none, so later requests keep their access. */
const initBody = fc
  .record(
    {
      envVars: mutated(fc.dictionary(nastyString, nastyString, { maxKeys: 3 })),
      accessToken: fc.constantFrom(TOKEN, ""),
      timestamp: mutated(
        fc.oneof(
          fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
          nastyString,
        ),
      ),
      defaultUser: mutated(fc.constantFrom("nobody", "nosuchuser", "")),
      defaultWorkdir: mutated(fuzzPath),
      hyperloopIP: nastyString,
      volumeMounts: nastyJson,
    },
    { requiredKeys: [] },
  )
  .map((b) => Buffer.from(JSON.stringify(b)));

const restRequest: fc.Arbitrary<FuzzRequest> = fc
  .record({
    which: fc.constantFrom(
      "GET /files",
      "HEAD /files",
      "POST /files",
      "POST /init",
      "GET /health",
      "GET /envs",
      "GET /metrics",
      "other",
    ),
    otherMethod: fc.constantFrom("PUT", "DELETE", "PATCH", "GET", "POST", "OPTIONS"),
    otherPath: fc.oneof(
      fc.constantFrom(
        "/",
        "/files/",
        "/FILES",
        "/init/../files",
        "//files",
        "/process.Process",
        "/%2e%2e/",
      ),
      nastyString.map((s) => `/${percentEncode(s)}`),
    ),
    query: filesQuery,
    multipart: multipartBody,
    octets: fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b)),
    gzip: fc.oneof(fc.constant("none"), fc.constant("valid"), fc.constant("junk")),
    upload: fc.constantFrom("multipart", "octet-stream", "other"),
    init: fc.oneof(
      { weight: 5, arbitrary: initBody },
      { weight: 1, arbitrary: fc.string().map((s) => Buffer.from(s)) },
    ),
    h: commonHeaders,
  })
  .map((r): FuzzRequest => {
    const headers: Record<string, string> = { ...r.h.extra, ...r.h.token };
    const [method, path] = r.which === "other" ? [r.otherMethod, r.otherPath] : r.which.split(" ");
    let body: Buffer | undefined;
    if (r.which === "POST /files") {
      if (r.upload === "multipart") {
        headers["content-type"] = r.multipart.contentType;
        body = r.multipart.body;
      } else {
        headers["content-type"] =
          r.upload === "octet-stream" ? "application/octet-stream" : "text/plain";
        body = r.octets;
      }
      if (r.gzip === "valid") body = gzipSync(body);
      if (r.gzip !== "none") headers["content-encoding"] = "gzip";
    }
    if (r.which === "POST /init") {
      headers["content-type"] = "application/json";
      body = r.init;
    }
    const withQuery = path === "/files" || r.which === "other";
    return {
      kind: "rest",
      method: method as string,
      path: withQuery ? `${path}?${r.query}` : (path as string),
      headers,
      body,
    };
  });

// ---- envd, the client and the checks ----

interface Answer {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  /** HTTP trailers (gRPC's status travels there). */
  readonly trailers: Record<string, string | undefined>;
  readonly body: Buffer;
}

const agent = new Agent({ keepAlive: true, maxSockets: 4 });
after(() => agent.destroy());

/** One request; rejects when no full answer comes within `limitMs`. */
function send(port: number, req: FuzzRequest, limitMs: number): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const r = httpRequest(
      { host: "127.0.0.1", port, method: req.method, path: req.path, headers: req.headers, agent },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          clearTimeout(timer);
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            trailers: res.trailers,
            // Asked with Accept-Encoding: gzip, a large enough answer comes compressed.
            body:
              res.headers["content-encoding"] === "gzip"
                ? gunzipSync(Buffer.concat(chunks))
                : Buffer.concat(chunks),
          });
        });
        res.on("error", reject);
      },
    );
    const timer = setTimeout(() => {
      r.destroy(new Error(`no full answer within ${limitMs} ms`));
    }, limitMs);
    r.on("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
    r.end(req.body);
  });
}

/** Connect codes and the HTTP status the protocol gives each (connect-es). */
const CONNECT_STATUS: Record<string, number> = {
  canceled: 499,
  unknown: 500,
  invalid_argument: 400,
  deadline_exceeded: 504,
  not_found: 404,
  already_exists: 409,
  permission_denied: 403,
  resource_exhausted: 429,
  failed_precondition: 400,
  aborted: 409,
  out_of_range: 400,
  unimplemented: 501,
  internal: 500,
  unavailable: 503,
  data_loss: 500,
  unauthenticated: 401,
};
/** What a handler that threw (a bug) turns into. */
const BUG_CODES = new Set(["internal", "unknown", "data_loss"]);
/**
 * `internal` that is connect-es's own answer, before any envd code runs: a message flagged
 * compressed without a Connect-Content-Encoding (gRPC's spec and connect-go say INTERNAL
 * too), and binary (protobuf) input that does not parse (connect-es says INTERNAL where
 * connect-go, E2B's envd, says INVALID_ARGUMENT; the SDK only sends JSON), a truncated
 * gzip body.
 */
const PROTOCOL_INTERNAL = [
  /^received compressed envelope, but do not know how to decompress$/,
  /^parse binary: /,
  // connect-node: a Content-Encoding: gzip body cut short (Z_BUF_ERROR; bad data is a 400).
  /^decompression failed$/,
];

function describe(req: FuzzRequest, answer: Answer): string {
  const body = req.body ? req.body.subarray(0, 200).toString("latin1") : "";
  return `${req.method} ${req.path.slice(0, 200)} ${JSON.stringify(req.headers).slice(0, 300)} ${JSON.stringify(body)}\n  → ${answer.status} ${answer.body.subarray(0, 300).toString("latin1")}`;
}

function checkRest(req: FuzzRequest, a: Answer): void {
  const what = describe(req, a);
  if (a.status >= 200 && a.status < 300) return;
  assert.ok(
    a.status >= 400 && (a.status < 500 || a.status === 503 || a.status === 507),
    `status: ${what}`,
  );
  if (req.method === "HEAD") return;
  const json = JSON.parse(a.body.toString("utf8")) as { code?: unknown; message?: unknown };
  assert.equal(json.code, a.status, `code is not the status: ${what}`);
  assert.equal(typeof json.message, "string", `no message: ${what}`);
}

/** A Connect error body (unary, or an end-stream message's `error`). */
function checkConnectError(error: { code?: unknown }, what: string, status?: number): void {
  assert.equal(typeof error.code, "string", `no Connect code: ${what}`);
  const code = error.code as string;
  assert.ok(code in CONNECT_STATUS, `unknown Connect code: ${what}`);
  const message = String((error as { message?: unknown }).message ?? "");
  const protocol = code === "internal" && PROTOCOL_INTERNAL.some((re) => re.test(message));
  assert.ok(!BUG_CODES.has(code) || protocol, `handler failure: ${what}`);
  if (status !== undefined) assert.equal(CONNECT_STATUS[code], status, `status ≠ code: ${what}`);
}

/** gRPC status numbers of BUG_CODES: unknown, internal, data_loss. */
const GRPC_BUG_STATUS = new Set(["2", "13", "15"]);

/** Envelopes of a streamed body: flags and payload each. */
function envelopesOf(body: Buffer, what: string): { flags: number; payload: Buffer }[] {
  const out: { flags: number; payload: Buffer }[] = [];
  let offset = 0;
  while (offset < body.length) {
    assert.ok(offset + 5 <= body.length, `truncated envelope: ${what}`);
    const flags = body.readUInt8(offset);
    const length = body.readUInt32BE(offset + 1);
    const payload = body.subarray(offset + 5, offset + 5 + length);
    assert.equal(payload.length, length, `truncated envelope: ${what}`);
    out.push({ flags, payload });
    offset += 5 + length;
  }
  return out;
}

/** A gRPC status (and message) from trailers, as gRPC and gRPC-web carry them. */
function checkGrpcStatus(status: string | undefined, message: string, what: string): void {
  assert.ok(status !== undefined, `no grpc-status: ${what}`);
  const protocol = status === "13" && PROTOCOL_INTERNAL.some((re) => re.test(message));
  assert.ok(!GRPC_BUG_STATUS.has(status) || protocol, `handler failure: ${what}`);
}

/**
 * Any answer on an RPC path, read by the protocol it came back in (the adapter serves
 * Connect, gRPC and gRPC-web, chosen by the request's content type).
 */
function checkRpc(req: FuzzRequest, a: Answer): void {
  const what = describe(req, a);
  // Not an RPC content type at all: Connect's plain 415.
  if (a.status === 415) return;
  const type = String(a.headers["content-type"] ?? "");
  if (type.startsWith("application/grpc-web")) {
    const trailer = envelopesOf(a.body, what).find((e) => e.flags & 0x80);
    const fields = new Map<string, string>();
    for (const line of (trailer?.payload.toString("utf8") ?? "").split("\r\n")) {
      const colon = line.indexOf(":");
      if (colon > 0)
        fields.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
    }
    const status = fields.get("grpc-status") ?? (a.headers["grpc-status"] as string | undefined);
    const message = decodeURIComponent(
      fields.get("grpc-message") ?? String(a.headers["grpc-message"] ?? ""),
    );
    checkGrpcStatus(status, message, what);
    return;
  }
  if (type.startsWith("application/grpc")) {
    const status = a.trailers["grpc-status"] ?? (a.headers["grpc-status"] as string | undefined);
    const message = a.trailers["grpc-message"] ?? String(a.headers["grpc-message"] ?? "");
    checkGrpcStatus(status, decodeURIComponent(message), what);
    return;
  }
  if (a.status !== 200 || !type.startsWith("application/connect+")) {
    if (a.status === 200) return; // a unary answer
    checkConnectError(JSON.parse(a.body.toString("utf8")), what, a.status);
    return;
  }
  // A Connect stream: the last envelope ends it (flag 0x02) and may carry an error.
  const end = envelopesOf(a.body, what).find((e) => e.flags & 0x02);
  assert.ok(end, `stream without its end message: ${what}`);
  const json = JSON.parse(end.payload.toString("utf8")) as { error?: { code?: unknown } };
  if (json.error) checkConnectError(json.error, what);
}

/** Entries of `nobody` directly in the world-writable directories (and whether its home exists). */
function nobodysLeftovers(): string[] {
  const found: string[] = [];
  for (const dir of WORLD_WRITABLE) {
    for (const name of readdirSync(dir).map((n) => join(dir, n))) {
      try {
        if (statSync(name).uid === NOBODY.uid) found.push(name);
      } catch {
        // gone meanwhile
      }
    }
  }
  if (existsSync(NOBODY.home)) found.push(NOBODY.home);
  return found;
}

/** Processes envd started that still run: those whose environment carries MARK. */
function markedProcesses(): string[] {
  const found: string[] = [];
  for (const pid of readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
    try {
      if (readFileSync(`/proc/${pid}/environ`, "latin1").includes(`WARREN_FUZZ_MARK=${MARK}`)) {
        found.push(
          `${pid} ${readFileSync(`/proc/${pid}/cmdline`, "latin1").replaceAll("\0", " ")}`,
        );
      }
    } catch {
      // gone meanwhile, or a kernel thread
    }
  }
  return found;
}

interface NobodyEnvd {
  readonly envd: ChildProcess;
  readonly port: number;
  readonly exited: Promise<number | null>;
  output(): string;
  /** send(), saying on failure whether envd is still there and what it printed. */
  ask(req: FuzzRequest, limitMs?: number): Promise<Answer>;
}

/** In the env of every process envd starts (/init's env vars): how its leftovers are found. */
const MARK = randomBytes(8).toString("hex");

const HEALTH: FuzzRequest = { kind: "rest", method: "GET", path: "/health", headers: {} };

/** As the orchestrator does first: a token, the user, the workdir. */
const INIT: FuzzRequest = {
  kind: "rest",
  method: "POST",
  path: "/init",
  headers: { "content-type": "application/json", "x-access-token": TOKEN },
  body: Buffer.from(
    JSON.stringify({
      accessToken: TOKEN,
      defaultUser: "nobody",
      defaultWorkdir: work,
      envVars: { WARREN_FUZZ_MARK: MARK },
    }),
  ),
};

/** The envd bundle as `nobody` on a free loopback port, healthy and /init'ed. */
async function startNobodyEnvd(t: TestContext): Promise<NobodyEnvd> {
  assert.ok(existsSync(ENVD_BUNDLE), `${ENVD_BUNDLE} is missing: run npm run build`);
  makeWork();
  const port = await freeLoopbackPort();
  let output = "";
  const envd: ChildProcess = spawn(
    process.execPath,
    [ENVD_BUNDLE, "--port", String(port), "--host", "127.0.0.1", "--default-user", "nobody"],
    {
      uid: NOBODY.uid,
      gid: NOBODY.gid,
      cwd: work,
      stdio: ["ignore", "pipe", "pipe"],
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
    },
  );
  envd.stdout?.on("data", (d: Buffer) => (output += d));
  envd.stderr?.on("data", (d: Buffer) => (output += d));
  const exited = new Promise<number | null>((resolve) =>
    envd.once("exit", (code) => resolve(code)),
  );
  t.after(() => {
    if (envd.exitCode === null) envd.kill("SIGKILL");
  });
  const ask = (req: FuzzRequest, limitMs = 10_000) =>
    send(port, req, limitMs).catch(async (err: Error) => {
      await new Promise((resolve) => setTimeout(resolve, 500));
      const state = envd.exitCode === null ? "alive" : `exited (${envd.exitCode})`;
      throw new Error(`${err.message}; envd ${state}; its output: ${output.slice(-3000)}`);
    });
  const deadline = Date.now() + 15_000;
  for (;;) {
    const ok = await send(port, HEALTH, 1_000).then(
      (a) => a.status === 204,
      () => false,
    );
    if (ok) break;
    assert.ok(envd.exitCode === null && Date.now() < deadline, `envd did not start: ${output}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.equal((await ask(INIT)).status, 204);
  return { envd, port, exited, output: () => output, ask };
}

const SKIP = hasNobody ? false : "needs root and a nobody account (envd runs as nobody)";

test("fuzz: envd answers bad RPCs and HTTP requests as documented, stays up, and leaves nothing behind", {
  skip: SKIP,
}, async (t) => {
  const filesBefore = new Set(nobodysLeftovers());
  const { envd, exited, output, ask, port } = await startNobodyEnvd(t);

  let cases = 0;
  const tally = new Map<string, number>();
  await fc.assert(
    fc.asyncProperty(
      fc.oneof({ weight: 3, arbitrary: rpcRequest }, { weight: 2, arbitrary: restRequest }),
      async (req) => {
        cases++;
        // A stream must end by its deadline (≤ 400 ms; junk ones are refused at once).
        const answer = await ask(req, req.kind === "stream" ? 5_000 : 10_000);
        const key = `${req.kind} ${answer.status}`;
        tally.set(key, (tally.get(key) ?? 0) + 1);
        if (req.kind === "rest") checkRest(req, answer);
        else checkRpc(req, answer);
        if (req.path.startsWith("/init")) {
          // Back to a known state: a fuzzed /init may have left an unknown default user.
          assert.equal((await ask(INIT)).status, 204, "reset /init");
        }
        assert.equal(envd.exitCode, null, `envd exited: ${output()}`);
      },
    ),
    fuzzParameters(t, RUNS),
  );
  reportCases(t, "envd", cases, tally);

  assert.equal((await ask(HEALTH)).status, 204, "envd still answers /health");
  // A command started without a deadline by a client that went away still runs (as it
  // should): SIGTERM must take it along, and the check below must see it until then.
  const sleeper = new AbortController();
  const started = await fetch(`http://127.0.0.1:${port}${PROCESS}Start`, {
    method: "POST",
    headers: { "content-type": "application/connect+json", "x-access-token": TOKEN },
    body: envelope(
      0,
      Buffer.from(JSON.stringify({ process: { cmd: "/bin/sleep", args: ["600"], cwd: "/" } })),
    ),
    signal: sleeper.signal,
  });
  const first = await started.body?.getReader().read(); // its start event
  sleeper.abort();
  const running = markedProcesses();
  assert.ok(
    running.some((p) => p.includes("sleep 600")),
    `the sleeper runs: ${running}; ${started.status} ${Buffer.from(first?.value ?? []).toString("latin1")}`,
  );
  t.diagnostic(`processes envd still runs before SIGTERM: ${running.length}`);
  envd.kill("SIGTERM");
  assert.equal(await exited, 0, `envd's exit on SIGTERM: ${output()}`);
  // What envd started is gone with it; nothing of nobody's is left outside the test's dir.
  await new Promise((resolve) => setTimeout(resolve, 200));
  assert.deepEqual(markedProcesses(), []);
  assert.deepEqual(
    nobodysLeftovers().filter((f) => !filesBefore.has(f)),
    [],
  );
});

test("envd fuzz finds, fixed: cut-short forms and bad gzip are 400s (not a crash), /proc reads keep their framing, NULs are refused, a watch of / is bounded", {
  skip: SKIP,
}, async (t) => {
  const { envd, ask } = await startNobodyEnvd(t);
  const upload = (contentType: string, body: Buffer, extra: Record<string, string> = {}) =>
    ask({
      kind: "rest",
      method: "POST",
      path: `/files?path=${percentEncode(`${work}/upload.bin`)}`,
      headers: { "x-access-token": TOKEN, "content-type": contentType, ...extra },
      body,
    });
  const cut = (name: string) =>
    Buffer.from(`--x\r\nContent-Disposition: form-data; name="${name}"; filename="f"\r\n\r\nabc`);

  // A form cut short in a part envd skips (not named "file") ended envd: unhandled 'error'.
  for (const name of ["other", "file"]) {
    const res = await upload("multipart/form-data; boundary=x", cut(name));
    assert.equal(res.status, 400, `${name}: ${res.body}`);
    assert.match(JSON.parse(res.body.toString()).message, /multipart form/);
  }
  // Content-Encoding: gzip on a body that is not: a 500, and a crash when the upload was
  // refused before its body was read.
  for (const type of [
    "application/octet-stream",
    "text/plain",
    "multipart/form-data; boundary=x",
  ]) {
    const res = await upload(type, Buffer.from("not gzip at all"), { "content-encoding": "gzip" });
    assert.equal(res.status, 400, `${type}: ${res.body}`);
  }
  // /proc files stat as empty but are not: the bytes beyond Content-Length spilled into the
  // connection, and the next answer on it could not be parsed. They are read to their end,
  // with no length announced (chunked).
  const environ = await ask({
    kind: "rest",
    method: "GET",
    path: `/files?path=${percentEncode("/proc/self/environ")}`,
    headers: { "x-access-token": TOKEN },
  });
  assert.equal(environ.status, 200);
  assert.equal(environ.headers["content-length"], undefined);
  assert.ok(environ.body.length > 0, "read to the end, not cut at the stated size 0");
  assert.equal((await ask(HEALTH)).status, 204, "the same connection still parses");
  // rmdir / is EBUSY: the caller's problem, not envd's internal error.
  const remove = await ask({
    kind: "unary",
    method: "POST",
    path: `${FILESYSTEM}Remove`,
    headers: { "x-access-token": TOKEN, "content-type": "application/json" },
    body: Buffer.from(JSON.stringify({ path: "/" })),
  });
  assert.notEqual(JSON.parse(remove.body.toString()).code, "internal", remove.body.toString());
  // An env var with a NUL accepted by /init made every later process start fail (internal).
  const poisoned = await ask({
    ...INIT,
    body: Buffer.from(JSON.stringify({ envVars: { "a\u0000b": "x" } })),
  });
  assert.equal(poisoned.status, 400, poisoned.body.toString());
  const start = (args: string[]) =>
    ask({
      kind: "stream",
      method: "POST",
      path: `${PROCESS}Start`,
      headers: {
        "x-access-token": TOKEN,
        "content-type": "application/connect+json",
        "connect-timeout-ms": "2000",
      },
      body: envelope(
        0,
        Buffer.from(JSON.stringify({ process: { cmd: "/bin/echo", args, cwd: "/" } })),
      ),
    });
  assert.match((await start(["a\u0000b"])).body.toString(), /"invalid_argument"/);
  assert.match((await start(["ok"])).body.toString(), /"stdout":"b2sK"/, "echo ok still runs");
  // A recursive watch of / walked the whole tree (/proc, /sys) synchronously: envd answered
  // nothing for many seconds. It stays on the root's filesystem, and past 10 000 directories
  // (or 3 s of walking, a cold disk) it is refused.
  const started = Date.now();
  const watch = await ask({
    kind: "unary",
    method: "POST",
    path: `${FILESYSTEM}CreateWatcher`,
    headers: { "x-access-token": TOKEN, "content-type": "application/json" },
    body: Buffer.from(JSON.stringify({ path: "/", recursive: true })),
  });
  assert.equal(JSON.parse(watch.body.toString()).code, "resource_exhausted", watch.body.toString());
  assert.ok(Date.now() - started < 8_000, `refused in ${Date.now() - started} ms`);
  assert.equal(envd.exitCode, null);
});
