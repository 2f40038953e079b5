import { createHash, randomBytes, randomUUID } from "node:crypto";
import type { ApiKeyRow, KeyMask } from "../catalog/index.js";

const PREFIX = "e2b_";
/** Hex digits after the prefix: 160 random bits, E2B's key length. */
const VALUE_HEX = 40;

/** A new key in the format the E2B SDK accepts (`e2b_` + 40 hex). */
export function newApiKeyValue(): string {
  return `${PREFIX}${randomBytes(VALUE_HEX / 2).toString("hex")}`;
}

/** What is stored of a key: its SHA-256, hex. The value itself is never kept. */
export function hashApiKey(key: string): string {
  return createHash("sha256").update(key).digest("hex");
}

/** How a key is shown once made: its prefix, length and last four characters. */
export function maskOf(key: string): KeyMask {
  const prefix = key.startsWith(PREFIX) ? PREFIX : "";
  const value = key.slice(prefix.length);
  return {
    prefix,
    valueLength: value.length,
    maskedValuePrefix: value.slice(0, 2),
    maskedValueSuffix: value.slice(-4),
  };
}

/** A new key for a team: the row to store and the value to show once. */
export function newApiKey(teamId: string, name: string): { row: ApiKeyRow; key: string } {
  const key = newApiKeyValue();
  return {
    key,
    row: {
      id: randomUUID(),
      teamId,
      name,
      hash: hashApiKey(key),
      mask: maskOf(key),
      createdAt: new Date().toISOString(),
    },
  };
}
