/**
 * API keys: `X-API-Key: <key>` (what the SDK sends; header names are case-insensitive)
 * or `Authorization: Bearer <key>` (what E2B's CLI sends). The key set is read on every
 * request, so keys can be rotated without a restart.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";
import { WarrenError } from "./errors.js";

/** The key a request presents, if any. */
export function presentedApiKey(headers: IncomingHttpHeaders): string | undefined {
  const apiKey = headers["x-api-key"];
  if (typeof apiKey === "string" && apiKey !== "") return apiKey;
  const authorization = headers.authorization;
  const match = authorization === undefined ? null : /^Bearer\s+(\S+)\s*$/i.exec(authorization);
  return match?.[1];
}

/** Compares digests in constant time, so the time taken says nothing about the keys. */
export function isValidApiKey(key: string | undefined, keys: ReadonlySet<string>): boolean {
  if (key === undefined) return false;
  const presented = digest(key);
  let valid = false;
  for (const candidate of keys) {
    if (timingSafeEqual(presented, digest(candidate))) valid = true;
  }
  return valid;
}

export function authenticate(headers: IncomingHttpHeaders, keys: ReadonlySet<string>): void {
  const key = presentedApiKey(headers);
  if (key === undefined) {
    throw new WarrenError("unauthenticated", "missing API key: send it in the X-API-Key header");
  }
  if (!isValidApiKey(key, keys)) throw new WarrenError("unauthenticated", "invalid API key");
}

function digest(key: string): Buffer {
  return createHash("sha256").update(key).digest();
}
