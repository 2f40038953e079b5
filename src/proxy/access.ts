import { createHash, timingSafeEqual } from "node:crypto";
import { ENVD_INTERNAL_PATHS } from "../protocol/index.js";

/** Read by the proxy itself; the sandbox never sees them. */
export const ROUTING_HEADERS: ReadonlySet<string> = new Set([
  "e2b-sandbox-id",
  "e2b-sandbox-port",
  "e2b-traffic-access-token",
]);

/** `Authorization` carrying an API key (`e2b_…`) or an E2B access token (`sk_e2b_…`). */
const WARREN_BEARER = /^\s*bearer\s+(sk_)?e2b_/i;

/** Warren's own credential headers: a sandbox never sees them, whatever port it is. */
const WARREN_CREDENTIALS: ReadonlySet<string> = new Set(["x-api-key", "x-admin-token"]);

/**
 * The caller's credentials for Warren's API, never a sandbox's business: a guest that read
 * them could drive every sandbox the key reaches (the admin token: every team's). `X-API-Key`
 * is the API's key header and `X-Admin-Token` the node's administrator's (clients send them
 * to the API only; one sent to a sandbox URL was sent by mistake), so they always go. `Authorization` goes only when it carries an API key (`Bearer e2b_…`) or
 * an E2B access token (`Bearer sk_e2b_…`): envd picks its user from `Basic` auth, and an
 * app in the guest may check bearer tokens of its own.
 */
export function withoutCallerCredentials(rawHeaders: readonly string[]): string[] {
  const kept: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = (rawHeaders[i] ?? "").toLowerCase();
    const value = rawHeaders[i + 1] ?? "";
    if (WARREN_CREDENTIALS.has(name)) continue;
    if (name === "authorization" && WARREN_BEARER.test(value)) continue;
    kept.push(rawHeaders[i] ?? "", value);
  }
  return kept;
}

const INTERNAL = ENVD_INTERNAL_PATHS.map((path) => path.toLowerCase());

/**
 * True when envd would serve `path` as one of its orchestrator-only routes, or anything
 * under one. Errs on the side of refusing: the path is checked as envd parses it (WHATWG
 * URL, dot segments resolved) and again percent-decoded, with repeated slashes collapsed
 * and case ignored.
 */
export function isInternalEnvdPath(path: string): boolean {
  const candidates = new Set<string>();
  const query = path.search(/[?#]/);
  const raw = query < 0 ? path : path.slice(0, query);
  candidates.add(raw);
  try {
    candidates.add(new URL(path, "http://envd").pathname);
  } catch {
    // Not parseable as envd parses it: the other forms still apply.
  }
  for (const candidate of [...candidates]) {
    let decoded = candidate;
    try {
      decoded = decodeURIComponent(candidate);
    } catch {
      // Malformed escapes: keep the raw form.
    }
    candidates.add(resolveDots(decoded.replace(/\/+/g, "/")));
  }
  for (const candidate of candidates) {
    const lower = candidate.toLowerCase().replace(/\/+$/, "");
    if (INTERNAL.some((p) => lower === p || lower.startsWith(`${p}/`))) return true;
  }
  return false;
}

function resolveDots(path: string): string {
  const out: string[] = [];
  for (const segment of path.split("/")) {
    if (segment === "." || segment === "") continue;
    if (segment === "..") out.pop();
    else out.push(segment);
  }
  return `/${out.join("/")}`;
}

/** Constant-time comparison of a presented token with the expected one (any lengths). */
export function tokenMatches(presented: string | undefined, expected: string | undefined): boolean {
  if (presented === undefined || expected === undefined || expected === "") return false;
  const a = createHash("sha256").update(presented).digest();
  const b = createHash("sha256").update(expected).digest();
  return timingSafeEqual(a, b);
}
