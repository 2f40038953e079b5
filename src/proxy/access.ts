import { createHash, timingSafeEqual } from "node:crypto";
import { ENVD_INTERNAL_PATHS } from "../protocol/index.js";

/** Read by the proxy itself; the sandbox never sees them. */
export const ROUTING_HEADERS: ReadonlySet<string> = new Set([
  "e2b-sandbox-id",
  "e2b-sandbox-port",
  "e2b-traffic-access-token",
]);

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
