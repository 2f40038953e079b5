import type { IncomingMessage } from "node:http";
import type { RouteAccess } from "../orchestrator/types.js";
import { ENVD_PORT } from "../protocol/index.js";
import { tokenMatches } from "./access.js";
import { signedFileRequest, signedWith } from "./signed-file.js";

/** The traffic access token header, required on app ports of private sandboxes. */
export const TRAFFIC_TOKEN_HEADER = "e2b-traffic-access-token";

/** What a request that may not wake a paused sandbox is told (E2B's words). */
export const WAKE_REFUSED =
  "This sandbox can't be resumed with the credentials provided. Check your access token and try again.";

/**
 * Why `req` may not reach a port of a private sandbox (its traffic token is missing or
 * wrong), or undefined when it may: public sandboxes, and envd's port (envd checks its own
 * token), ask for none.
 */
export function trafficTokenRefusal(
  req: IncomingMessage,
  port: number,
  access: RouteAccess,
): string | undefined {
  if (access.allowPublicTraffic || port === ENVD_PORT) return undefined;
  const token = single(req.headers[TRAFFIC_TOKEN_HEADER]);
  if (tokenMatches(token, access.trafficAccessToken)) return undefined;
  return `${token === undefined ? "Missing" : "Invalid"} ${TRAFFIC_TOKEN_HEADER} header`;
}

/**
 * Whether `req` may wake a paused sandbox (autoResume): it carries what the sandbox asks of
 * traffic to that port, as E2B's auto-resume checks before it resumes anything: the
 * traffic token on a private sandbox's app ports; on a secure sandbox's envd port, envd's
 * own token (`X-Access-Token`, or a signed file URL envd would accept). envd checks that
 * token itself once the sandbox runs; a paused one must not be woken, its resources taken
 * and its life extended, by a request envd would then refuse.
 */
export function mayWake(
  req: IncomingMessage,
  port: number,
  access: RouteAccess,
  nowMs = Date.now(),
): boolean {
  if (trafficTokenRefusal(req, port, access) !== undefined) return false;
  const envdToken = access.envdAccessToken;
  if (port !== ENVD_PORT || envdToken === undefined) return true;
  if (tokenMatches(single(req.headers["x-access-token"]), envdToken)) return true;
  const signed = signedFileRequest(req);
  const current = signed?.expiration === undefined || signed.expiration * 1000 > nowMs;
  return signed !== undefined && current && signedWith(signed, envdToken);
}

export function single(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}
