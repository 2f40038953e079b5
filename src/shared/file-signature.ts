import { createHash } from "node:crypto";

export type FileOperation = "read" | "write";

/**
 * A signed file URL's `signature`, as the e2b SDK computes it and envd checks it: `v1_` +
 * unpadded base64 of sha256("<path>:<op>:<user>:<token>[:<expiration>]"). The node's proxy
 * uses it too, to find which sandbox a signed URL without routing information is for.
 */
export function fileSignature(
  path: string,
  operation: FileOperation,
  username: string,
  token: string,
  expiration?: number,
): string {
  const raw = `${path}:${operation}:${username}:${token}${expiration === undefined ? "" : `:${expiration}`}`;
  return `v1_${createHash("sha256").update(raw).digest("base64").replace(/=+$/, "")}`;
}
