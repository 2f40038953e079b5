import "reflect-metadata"; // @peculiar/x509's dependency injection needs it, once, first
import { createPrivateKey, randomBytes, webcrypto } from "node:crypto";
import { chmod, rename, writeFile } from "node:fs/promises";
import * as x509 from "@peculiar/x509";

/**
 * What both CAs (domain mode's local CA, the cluster CA) make certificates with: ECDSA P-256
 * keys through Node's WebCrypto, random serials, keys written as PKCS#8 PEM, files replaced
 * atomically with their mode set whatever the umask.
 */

// Node's WebCrypto, typed as Node's (the DOM's Crypto type is not in this project's libs).
x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

export { x509 };

export type CryptoKey = webcrypto.CryptoKey;

export const ALGORITHM = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
export const DAY_MS = 86_400_000;

export function serial(): string {
  const bytes = randomBytes(16);
  bytes[0] = (bytes[0] as number) & 0x7f; // positive
  return bytes.toString("hex");
}

export async function pkcs8Pem(key: CryptoKey): Promise<string> {
  const der = Buffer.from(await webcrypto.subtle.exportKey("pkcs8", key));
  return createPrivateKey({ key: der, format: "der", type: "pkcs8" })
    .export({ type: "pkcs8", format: "pem" })
    .toString();
}

export async function writeAtomically(path: string, text: string, mode: number): Promise<void> {
  const temp = `${path}.${randomBytes(4).toString("hex")}.tmp`;
  await writeFile(temp, text, { mode });
  await chmod(temp, mode); // whatever the umask
  await rename(temp, path);
}
