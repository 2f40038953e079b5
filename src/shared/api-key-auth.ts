/**
 * Where a request carries an API key: `X-API-Key: <key>` (what the SDK sends; header names
 * are case-insensitive) or `Authorization: Bearer <key>` (what E2B's CLI sends). Who the key
 * is, and what it may do, is src/tenancy's.
 */
import type { IncomingHttpHeaders } from "node:http";

/** The key a request presents, if any. */
export function presentedApiKey(headers: IncomingHttpHeaders): string | undefined {
  const apiKey = headers["x-api-key"];
  if (typeof apiKey === "string" && apiKey !== "") return apiKey;
  const authorization = headers.authorization;
  const match = authorization === undefined ? null : /^Bearer\s+(\S+)\s*$/i.exec(authorization);
  return match?.[1];
}
