/**
 * CORS for envd: what the `e2b` SDK needs to drive envd from a browser, nothing more.
 *
 * The lists below are what the SDK 2.51 sends and reads (node_modules/e2b/dist/index.mjs:
 * its Connect transport's `fetch` wrapper, `EnvdApiClient`, `Filesystem.read/write`):
 * - requests: Connect's `Content-Type`, `Connect-Protocol-Version`, `Connect-Timeout-Ms`;
 *   `Keepalive-Ping-Interval` on streams; `Authorization: Basic <user>:` when a user is named;
 *   `X-Access-Token`; `E2b-Sandbox-Id` / `E2b-Sandbox-Port` on every call; `User-Agent`
 *   (browsers that let scripts set it still preflight it); `Content-Encoding: gzip` on gzip
 *   uploads; one `X-Metadata-<key>` per file metadata key (keys are the caller's, so that
 *   prefix is allowed rather than a fixed name).
 * - methods: POST (every RPC, uploads), GET and HEAD (`/files`, `/health`, `/envs`,
 *   `/metrics`). envd serves nothing else.
 * - responses: the SDK reads `Content-Type` and `Content-Length`, which browsers always
 *   expose; Connect's unary and streaming errors travel in the body. Exposed besides:
 *   `Content-Disposition` (a download's file name) and `Content-Range` (a ranged read).
 *
 * E2B's envd allows any header (`*`) and methods envd has no route for; `*` for headers does
 * not even cover `Authorization` (the fetch standard excludes it), which broke the SDK's
 * named-user calls from browsers. The origin stays `*`, as in E2B's envd: envd authenticates
 * by the `X-Access-Token` header (or a signed URL), never by cookies or other ambient
 * credentials, and `*` forbids credentialed requests, so a foreign page gains nothing a
 * server-side script with the same token would not have.
 */
import type { IncomingMessage, ServerResponse } from "node:http";

export const CORS_ALLOWED_METHODS: readonly string[] = ["GET", "HEAD", "POST"];

export const CORS_ALLOWED_HEADERS: readonly string[] = [
  "Authorization",
  "Connect-Protocol-Version",
  "Connect-Timeout-Ms",
  "Content-Encoding",
  "Content-Type",
  "E2b-Sandbox-Id",
  "E2b-Sandbox-Port",
  "Keepalive-Ping-Interval",
  "User-Agent",
  "X-Access-Token",
];

export const CORS_EXPOSED_HEADERS: readonly string[] = ["Content-Disposition", "Content-Range"];

/** How long a browser may cache a preflight's answer, seconds (E2B's envd: 2 h). */
const MAX_AGE_SECONDS = "7200";

/** `X-Metadata-<key>`: the key must be an HTTP token, as the SDK itself checks. */
const METADATA_HEADER = /^x-metadata-[a-z0-9!#$%&'*+\-.^_`|~]+$/;

const ALLOWED = new Set(CORS_ALLOWED_HEADERS.map((name) => name.toLowerCase()));

function isAllowedHeader(name: string): boolean {
  return ALLOWED.has(name) || METADATA_HEADER.test(name);
}

/**
 * Sets the CORS headers of a response; answers a preflight (OPTIONS) itself and says so.
 * A preflight asking for a method or a header outside the lists gets no `Access-Control-*`
 * header at all, so the browser refuses the request it was asking about.
 */
export function applyCors(req: IncomingMessage, res: ServerResponse): boolean {
  if (req.method !== "OPTIONS") {
    res.setHeader("Access-Control-Allow-Origin", "*");
    res.setHeader("Access-Control-Expose-Headers", CORS_EXPOSED_HEADERS.join(", "));
    return false;
  }
  const method = req.headers["access-control-request-method"];
  if (typeof method !== "string") {
    // A plain OPTIONS, not a preflight: nothing to grant.
    res.writeHead(204, { "Access-Control-Allow-Origin": "*" });
    res.end();
    return true;
  }
  const requested = (req.headers["access-control-request-headers"] ?? "")
    .split(",")
    .map((name) => name.trim().toLowerCase())
    .filter((name) => name !== "");
  // The answer depends on what was asked (metadata headers are echoed): caches must key on it.
  res.setHeader("Vary", "Access-Control-Request-Method, Access-Control-Request-Headers");
  if (!CORS_ALLOWED_METHODS.includes(method.trim()) || !requested.every(isAllowedHeader)) {
    res.writeHead(204);
    res.end();
    return true;
  }
  const metadata = requested.filter((name) => !ALLOWED.has(name));
  res.writeHead(204, {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": CORS_ALLOWED_METHODS.join(", "),
    "Access-Control-Allow-Headers": [...CORS_ALLOWED_HEADERS, ...new Set(metadata)].join(", "),
    "Access-Control-Max-Age": MAX_AGE_SECONDS,
  });
  res.end();
  return true;
}
