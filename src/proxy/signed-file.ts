import type { IncomingMessage } from "node:http";
import { type FileOperation, fileSignature } from "../shared/index.js";
import { tokenMatches } from "./access.js";

/** What a signed file URL (`/files?path=…&signature=…`) says, for finding its sandbox. */
export interface SignedFileRequest {
  readonly path: string;
  readonly username: string;
  readonly operation: FileOperation;
  readonly signature: string;
  readonly expiration?: number;
}

/**
 * The signed file URL a request is, if it is one: `GET`/`HEAD` (read) or `POST` (write) of
 * `/files` with a `signature`. In plain mode the SDK builds these on E2B_SANDBOX_URL with
 * nothing that names the sandbox (`uploadUrl`, `downloadUrl`), so the signature does.
 */
export function signedFileRequest(req: IncomingMessage): SignedFileRequest | undefined {
  const operation: FileOperation | undefined =
    req.method === "GET" || req.method === "HEAD"
      ? "read"
      : req.method === "POST"
        ? "write"
        : undefined;
  if (!operation || !req.url?.startsWith("/files?")) return undefined;
  let query: URLSearchParams;
  try {
    const url = new URL(req.url, "http://proxy");
    if (url.pathname !== "/files") return undefined;
    query = url.searchParams;
  } catch {
    return undefined;
  }
  const signature = query.get("signature");
  if (!signature) return undefined;
  const expirationText = query.get("signature_expiration");
  const expiration = expirationText === null ? undefined : Number(expirationText);
  if (expiration !== undefined && !Number.isSafeInteger(expiration)) return undefined;
  return {
    path: query.get("path") ?? "",
    username: query.get("username") ?? "",
    operation,
    signature,
    ...(expiration !== undefined && { expiration }),
  };
}

/** Whether `signed` was signed with this envd access token (in constant time). */
export function signedWith(signed: SignedFileRequest, envdAccessToken: string): boolean {
  const expected = fileSignature(
    signed.path,
    signed.operation,
    signed.username,
    envdAccessToken,
    signed.expiration,
  );
  return tokenMatches(signed.signature, expected);
}
