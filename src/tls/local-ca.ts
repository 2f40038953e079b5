import { createPrivateKey, type KeyObject, webcrypto, X509Certificate } from "node:crypto";
import { mkdir, readFile } from "node:fs/promises";
import { hostname } from "node:os";
import { join } from "node:path";
import {
  ALGORITHM,
  createCa,
  DAY_MS,
  issueServerCertificate,
  loadX509,
  pkcs8Pem,
  type SigningCa,
  signingCa,
  writeAtomically,
} from "./certificate-kit.js";
import type { TlsIdentity } from "./tls-identity.js";

const CA_VALIDITY_DAYS = 3650;
/** Browsers refuse server certificates valid for more than 398 days; 90 is what ACME issues. */
const LEAF_VALIDITY_DAYS = 90;
const RENEW_BEFORE_DAYS = 30;

export interface LocalCaOptions {
  /** Directory of the CA and the certificate it issued (`<data dir>/tls`). */
  readonly dir: string;
  /** The wildcard certificate covers `*.<domain>` and `<domain>`. */
  readonly domain: string;
  /** Clock (tests move it). */
  readonly now?: () => Date;
}

/** What `ensureLocalCertificate` found or made. */
export interface LocalCertificate extends TlsIdentity {
  readonly caFile: string;
  /** A new certificate was issued (first start, another domain, or its expiry was near). */
  readonly issued: boolean;
  /**
   * Set when an existing CA was replaced by a new one, and why: clients that trusted the
   * old `ca.crt` must trust the new one (and should drop the old).
   */
  readonly caReplaced?: string;
}

/** Files in the directory: the CA's key and the server key are root's alone (0600). */
const FILES = {
  caCert: "ca.crt",
  caKey: "ca.key",
  cert: "server.crt",
  key: "server.key",
} as const;

/**
 * A local certificate authority for the domain, made once in `dir` (`ca.crt`, which clients
 * trust, and its key), and a wildcard server certificate for the domain signed by it,
 * issued again when it is within 30 days of expiry, for another domain, or not the CA's.
 * ECDSA P-256 keys.
 *
 * The CA can vouch for the domain's names alone (critical X.509 name constraints: the
 * domain and its subdomains permitted, every IP address excluded; server authentication
 * only): whoever trusts it trusts nothing else to it, even if its key leaks. A CA found
 * without those constraints for this domain (made before them, or for another domain) is
 * replaced by a new one, its key overwritten: `caReplaced` says so, and why.
 */
export async function ensureLocalCertificate(options: LocalCaOptions): Promise<LocalCertificate> {
  const now = options.now?.() ?? new Date();
  const { dir, domain } = options;
  await mkdir(dir, { recursive: true, mode: 0o755 });
  const found = await loadCa(dir);
  const unfit = found && (await caUnfitFor(found, domain));
  const ca = found && !unfit ? found : await createLocalCa(dir, domain, now);
  const replaced = unfit ? { caReplaced: unfit } : {};
  const path = (name: keyof typeof FILES) => join(dir, FILES[name]);
  const current = await readPair(path("cert"), path("key"));
  if (current && stillGood(current.certificate, ca.certificate, domain, now)) {
    return { ...current.identity, caFile: path("caCert"), issued: false, ...replaced };
  }
  const leafKeys = await webcrypto.subtle.generateKey(ALGORITHM, true, ["sign", "verify"]);
  const leafPem = await issueServerCertificate(
    ca,
    leafKeys.publicKey,
    [`*.${domain}`, domain],
    now,
    new Date(now.getTime() + LEAF_VALIDITY_DAYS * DAY_MS),
  );
  // The chain: the server certificate, then the CA's.
  const cert = `${leafPem}\n${ca.pem}`;
  const key = await pkcs8Pem(leafKeys.privateKey);
  await writeAtomically(path("key"), key, 0o600);
  await writeAtomically(path("cert"), cert, 0o644);
  return {
    cert,
    key,
    notAfter: new Date(new X509Certificate(leafPem).validTo),
    caFile: path("caCert"),
    issued: true,
    ...replaced,
  };
}

/** When a certificate ending at `notAfter` should be replaced. */
export function renewalDue(notAfter: Date): Date {
  return new Date(notAfter.getTime() - RENEW_BEFORE_DAYS * DAY_MS);
}

async function loadCa(dir: string): Promise<SigningCa | undefined> {
  const pair = await readPair(join(dir, FILES.caCert), join(dir, FILES.caKey));
  return pair && signingCa(pair.identity.cert, pair.keyObject);
}

/** Why a CA found in the directory may not serve `domain`, or undefined when it may. */
async function caUnfitFor(ca: SigningCa, domain: string): Promise<string | undefined> {
  const x509 = await loadX509();
  const found = new x509.X509Certificate(ca.pem).getExtension(NAME_CONSTRAINTS_OID);
  if (!found) return "the CA had no name constraints";
  const expected = Buffer.from(nameConstraints(domain));
  if (!found.critical || !Buffer.from(found.value).equals(expected))
    return "the CA is for another domain";
  return undefined;
}

function createLocalCa(dir: string, domain: string, now: Date): Promise<SigningCa> {
  return createCa({
    name: `Warren local CA (${hostname()})`,
    now,
    validityDays: CA_VALIDITY_DAYS,
    keyFile: join(dir, FILES.caKey),
    certFile: join(dir, FILES.caCert),
    crlSign: true,
    serverAuthOnly: true,
    extensions: (x509) => [new x509.Extension(NAME_CONSTRAINTS_OID, true, nameConstraints(domain))],
  });
}

const NAME_CONSTRAINTS_OID = "2.5.29.30";

/**
 * The DER of a NameConstraints extension (RFC 5280 4.2.1.10) permitting the DNS subtree of
 * `domain` (the domain and every name under it) and excluding every IPv4 and IPv6 address.
 * Written out here: @peculiar/x509 has no class for it.
 */
function nameConstraints(domain: string): ArrayBuffer {
  const subtree = (generalName: Buffer) => der(0x30, generalName);
  const value = der(
    0x30,
    der(0xa0, subtree(der(0x82, Buffer.from(domain, "ascii")))), // permitted: dNSName
    der(
      0xa1, // excluded: iPAddress, address and mask all zero (every address)
      subtree(der(0x87, Buffer.alloc(8))),
      subtree(der(0x87, Buffer.alloc(32))),
    ),
  );
  return new Uint8Array(value).buffer;
}

/** One DER element: tag, definite length, contents. */
function der(tag: number, ...contents: Buffer[]): Buffer {
  const body = Buffer.concat(contents);
  const n = body.length;
  const length = n < 0x80 ? [n] : n < 0x100 ? [0x81, n] : [0x82, (n >> 8) & 0xff, n & 0xff];
  return Buffer.concat([Buffer.from([tag, ...length]), body]);
}

function stillGood(leaf: X509Certificate, ca: X509Certificate, domain: string, now: Date): boolean {
  return (
    leaf.checkIssued(ca) &&
    leaf.verify(ca.publicKey) &&
    leaf.checkHost(`api.${domain}`) !== undefined &&
    renewalDue(new Date(leaf.validTo)).getTime() > now.getTime()
  );
}

interface Pair {
  readonly identity: TlsIdentity;
  readonly certificate: X509Certificate;
  readonly keyObject: KeyObject;
}

/** A certificate file and its key, or undefined when either is missing or they do not match. */
async function readPair(certFile: string, keyFile: string): Promise<Pair | undefined> {
  const [cert, key] = await Promise.all([
    readFile(certFile, "utf8").catch(() => undefined),
    readFile(keyFile, "utf8").catch(() => undefined),
  ]);
  if (cert === undefined || key === undefined) return undefined;
  try {
    const certificate = new X509Certificate(cert);
    const keyObject = createPrivateKey(key);
    if (!certificate.checkPrivateKey(keyObject)) return undefined;
    return {
      identity: { cert, key, notAfter: new Date(certificate.validTo) },
      certificate,
      keyObject,
    };
  } catch {
    return undefined; // unreadable: made again
  }
}
