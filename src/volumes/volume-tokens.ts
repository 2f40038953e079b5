import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";

/**
 * A volume's content API tokens. The catalog keeps each volume's signing key (the row's
 * `token` column, never handed out); a token is `wvt1.<expiry>.<MAC>`: HMAC-SHA256 under
 * the key of the volume's id and the expiry (Unix seconds). So every `GET /volumes/{id}`
 * hands out a fresh token (as E2B's do), each stops working at its expiry, and a new key
 * (`rotateKey`) ends every token handed out before it at once. Any node of a cluster
 * verifies one: the key is in the shared catalog.
 */
const PREFIX = "wvt1";

/** A new volume's signing key. */
export function newVolumeKey(): string {
  return randomBytes(32).toString("base64url");
}

/** A token for the volume's content, valid until `expiresAt` (ms since the epoch). */
export function issueVolumeToken(volumeId: string, key: string, expiresAt: number): string {
  const expiry = Math.floor(expiresAt / 1000);
  return `${PREFIX}.${expiry}.${mac(volumeId, key, expiry).toString("base64url")}`;
}

/** Why a presented token does not open the volume's content; undefined when it does. */
export function tokenRefusal(
  volumeId: string,
  key: string,
  token: string,
  now: number,
): "malformed" | "expired" | "wrong" | undefined {
  const [prefix, expiryText, signature, ...rest] = token.split(".");
  if (prefix !== PREFIX || rest.length > 0 || !expiryText || !signature) return "malformed";
  if (!/^\d{1,12}$/.test(expiryText)) return "malformed";
  const expiry = Number(expiryText);
  const presented = Buffer.from(signature, "base64url");
  const expected = mac(volumeId, key, expiry);
  if (presented.length !== expected.length || !timingSafeEqual(presented, expected)) {
    return "wrong";
  }
  return expiry * 1000 <= now ? "expired" : undefined;
}

function mac(volumeId: string, key: string, expiry: number): Buffer {
  return createHmac("sha256", key).update(`${volumeId}.${expiry}`).digest();
}
