import {
  createPrivateKey,
  type KeyObject,
  randomBytes,
  webcrypto,
  X509Certificate,
} from "node:crypto";
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

/** A CA certificate with its keys imported for WebCrypto: what issues certificates. */
export interface SigningCa {
  readonly pem: string;
  readonly certificate: X509Certificate;
  readonly publicKey: CryptoKey;
  readonly signingKey: CryptoKey;
}

/** A CA read from PEM (its certificate and the KeyObject of its private key). */
export async function signingCa(pem: string, key: KeyObject): Promise<SigningCa> {
  const certificate = new X509Certificate(pem);
  return {
    pem: pem.trim(),
    certificate,
    publicKey: await webcrypto.subtle.importKey(
      "spki",
      certificate.publicKey.export({ type: "spki", format: "der" }),
      ALGORITHM,
      true,
      ["verify"],
    ),
    signingKey: await webcrypto.subtle.importKey(
      "pkcs8",
      key.export({ type: "pkcs8", format: "der" }),
      ALGORITHM,
      false,
      ["sign"],
    ),
  };
}

/**
 * A server certificate signed by `ca` for DNS `names` (the first is its CN): server
 * authentication only, valid from a minute ago (clocks differ) until `notAfter`.
 */
export async function issueServerCertificate(
  ca: SigningCa,
  publicKey: CryptoKey,
  names: readonly string[],
  now: Date,
  notAfter: Date,
): Promise<string> {
  const x509 = await loadX509();
  const leaf = await x509.X509CertificateGenerator.create({
    serialNumber: serial(),
    subject: `CN=${names[0]}`,
    // The issuer exactly as the CA certificate encodes its subject.
    issuer: new x509.X509Certificate(ca.pem).subject,
    notBefore: new Date(now.getTime() - 60_000),
    notAfter,
    signingKey: ca.signingKey,
    publicKey,
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(names.map((value) => ({ type: "dns", value }))),
      await x509.AuthorityKeyIdentifierExtension.create(ca.publicKey),
    ],
  });
  return leaf.toString("pem");
}

export interface CaOptions {
  /** The CA's common name (`O=Warren` is added). */
  readonly name: string;
  readonly now: Date;
  readonly validityDays: number;
  /** Where the key (0600, written first) and the certificate (0644) go. */
  readonly keyFile: string;
  readonly certFile: string;
  /** Also signs CRLs (the local and egress CAs say so; the cluster CA signs certificates only). */
  readonly crlSign: boolean;
  /** Vouches for servers only: clients that chain EKUs refuse it for S/MIME or code. */
  readonly serverAuthOnly: boolean;
  /** More extensions, e.g. the local CA's name constraints. */
  readonly extensions?: (x509: X509) => InstanceType<X509["Extension"]>[];
}

/**
 * A new self-signed CA that signs end certificates only (path length 0), its files written
 * key first: a certificate without its key would be made again, orphaning what trusts it.
 */
export async function createCa(options: CaOptions): Promise<SigningCa> {
  const x509 = await loadX509();
  const keys = await webcrypto.subtle.generateKey(ALGORITHM, true, ["sign", "verify"]);
  const usages =
    x509.KeyUsageFlags.keyCertSign | (options.crlSign ? x509.KeyUsageFlags.cRLSign : 0);
  const ca = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(),
    name: `CN=${options.name}, O=Warren`,
    notBefore: new Date(options.now.getTime() - 60_000),
    notAfter: new Date(options.now.getTime() + options.validityDays * DAY_MS),
    keys,
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(usages, true),
      ...(options.extensions?.(x509) ?? []),
      ...(options.serverAuthOnly
        ? [new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth])]
        : []),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  const pem = ca.toString("pem");
  const keyPem = await pkcs8Pem(keys.privateKey);
  await writeAtomically(options.keyFile, keyPem, 0o600);
  await writeAtomically(options.certFile, `${pem}\n`, 0o644);
  // As a CA read back from its files would be: its signing key not extractable.
  return signingCa(pem, createPrivateKey(keyPem));
}
