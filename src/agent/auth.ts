import { timingSafeEqual } from "node:crypto";
import { type FileOperation, fileSignature } from "../shared/file-signature.js";
import { WarrenError } from "../shared/index.js";
import type { AgentState } from "./state.js";

export const ACCESS_TOKEN_HEADER = "x-access-token";

function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export function hasValidToken(state: AgentState, presented: string | null | undefined): boolean {
  return (
    state.accessToken === undefined || (!!presented && sameSecret(presented, state.accessToken))
  );
}

/** Throws `unauthenticated` unless no token is configured or the request carries it. */
export function requireAccessToken(state: AgentState, presented: string | null | undefined): void {
  if (!hasValidToken(state, presented)) {
    throw new WarrenError(
      "unauthenticated",
      "unauthorized access, please provide a valid access token or method signing if supported",
    );
  }
}

/** The user named in `Authorization: Basic base64("<user>:")`, if any. */
export function userFromBasicAuth(header: string | null | undefined): string | undefined {
  if (!header) return undefined;
  const match = /^basic\s+(\S+)$/i.exec(header.trim());
  if (!match?.[1]) throw new WarrenError("unauthenticated", "malformed Authorization header");
  const decoded = Buffer.from(match[1], "base64").toString("utf8");
  const name = decoded.split(":")[0];
  return name || undefined;
}

export { type FileOperation, fileSignature } from "../shared/file-signature.js";

export interface FileAuthRequest {
  readonly token: string | null | undefined;
  readonly path: string;
  readonly username: string | undefined;
  readonly signature: string | undefined;
  readonly signatureExpiration: string | undefined;
  readonly operation: FileOperation;
  readonly nowMs?: number;
}

/**
 * `/files` accepts the access token or, without a token header, a valid unexpired URL
 * signature; checks run in envd's order so the messages match.
 */
export function requireFileAccess(state: AgentState, req: FileAuthRequest): void {
  const token = state.accessToken;
  if (token === undefined) return;
  if (req.token) {
    if (sameSecret(req.token, token)) return;
    throw new WarrenError("unauthenticated", "access token present in header but does not match");
  }
  if (!req.signature) throw new WarrenError("unauthenticated", "missing signature query parameter");
  let expiration: number | undefined;
  if (req.signatureExpiration !== undefined) {
    expiration = Number(req.signatureExpiration);
    if (!Number.isInteger(expiration)) {
      throw new WarrenError("invalid_argument", "signature_expiration must be unix seconds");
    }
  }
  const expected = fileSignature(req.path, req.operation, req.username ?? "", token, expiration);
  if (!sameSecret(req.signature, expected))
    throw new WarrenError("unauthenticated", "invalid signature");
  if (expiration !== undefined && expiration * 1000 < (req.nowMs ?? Date.now())) {
    throw new WarrenError("unauthenticated", "signature is already expired");
  }
}
