import { createHash } from "node:crypto";

/**
 * E2B's webhook signature (`e2b-signature`, version `v1`): SHA-256 over the signature secret
 * followed by the raw body, standard base64 without its `=` padding. Not an HMAC: this is
 * what E2B's receivers verify.
 */
export function webhookSignature(secret: string, body: string): string {
  return createHash("sha256")
    .update(secret + body, "utf8")
    .digest("base64")
    .replace(/=+$/, "");
}
