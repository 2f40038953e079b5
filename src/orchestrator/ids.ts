import { randomBytes, randomInt } from "node:crypto";

const ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789";

/** Sandbox and snapshot ids: 20 chars of [a-z0-9] (never `-` or `.`: they split Host names). */
export function newId(length = 20): string {
  let id = "";
  for (let i = 0; i < length; i++) id += ID_ALPHABET[randomInt(ID_ALPHABET.length)];
  return id;
}

/** Secrets handed to clients (envd access token, traffic token). */
export function newToken(): string {
  return randomBytes(24).toString("hex");
}
