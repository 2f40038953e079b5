import { createPrivateKey, randomBytes, webcrypto } from "node:crypto";
import { chmod, rename, writeFile } from "node:fs/promises";

/**
 * What both CAs (domain mode's local CA, the cluster CA) make certificates with: ECDSA P-256
 * keys through Node's WebCrypto, random serials, keys written as PKCS#8 PEM, files replaced
 * atomically with their mode set whatever the umask.
 */

export type X509 = typeof import("@peculiar/x509");

let x509: Promise<X509> | undefined;

/**
 * @peculiar/x509, loaded on first use: it (and reflect-metadata) take most of a second to
 * load, which only the code that makes certificates should pay (the `warren` command loads
 * this component for `warren cluster` alone; checking certificates needs node:crypto only).
 */
export function loadX509(): Promise<X509> {
  x509 ??= (async () => {
    await import("reflect-metadata"); // its dependency injection needs it, once, first
    const lib = await import("@peculiar/x509");
    // Node's WebCrypto, typed as Node's (the DOM's Crypto type is not in this project's libs).
    lib.cryptoProvider.set(webcrypto as unknown as Parameters<typeof lib.cryptoProvider.set>[0]);
    return lib;
  })();
  return x509;
}

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
