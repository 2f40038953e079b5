import { createPrivateKey, webcrypto, X509Certificate } from "node:crypto";
import { mkdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { WarrenError } from "../shared/index.js";
import {
  ALGORITHM,
  createCa,
  DAY_MS,
  loadX509,
  pkcs8Pem,
  serial,
  signingCa,
  writeAtomically,
} from "./certificate-kit.js";
import { type ClusterIdentity, identityUri } from "./cluster-identity.js";

/**
 * The cluster CA: the authority gateways and nodes recognise each other by. It lives where
 * the operator keeps it (never on a node, never in the database): `ca.crt` goes to every
 * gateway and node, `ca.key` (0600) stays with whoever issues certificates.
 */
export const CA_FILES = { cert: "ca.crt", key: "ca.key" } as const;

/** What a member's directory (WARREN_CLUSTER_TLS_DIR) holds for its role. */
export const MEMBER_FILES = {
  node: { cert: "node.crt", key: "node.key" },
  gateway: { cert: "gateway.crt", key: "gateway.key" },
} as const;

const CA_VALIDITY_DAYS = 3650;
export const DEFAULT_VALIDITY_DAYS = 365;

/** Makes a cluster CA in `dir`; refuses when one is there (it would orphan every certificate). */
export async function createClusterCa(
  dir: string,
  options: { readonly name?: string; readonly now?: Date } = {},
): Promise<{ readonly certFile: string; readonly keyFile: string }> {
  const now = options.now ?? new Date();
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const certFile = join(dir, CA_FILES.cert);
  const keyFile = join(dir, CA_FILES.key);
  for (const file of [certFile, keyFile]) {
    if (await stat(file).catch(() => undefined)) {
      throw new WarrenError(
        "invalid_argument",
        `${file} exists: a cluster CA is already there (a new one would orphan every certificate it issued)`,
      );
    }
  }
  await createCa({
    name: options.name ?? "Warren cluster CA",
    now,
    validityDays: CA_VALIDITY_DAYS,
    keyFile,
    certFile,
    // Signs members' certificates only: no CRLs, no other CA; clients and servers alike.
    crlSign: false,
    serverAuthOnly: false,
  });
  return { certFile, keyFile };
}

export interface IssueOptions {
  /** The CA's directory (`ca.crt`, `ca.key`). */
  readonly caDir: string;
  /** Where the member's files go: `ca.crt`, and `node.crt`/`node.key` or `gateway.*`. */
  readonly outDir: string;
  readonly identity: ClusterIdentity;
  readonly days?: number;
  readonly now?: Date;
}

export interface IssuedCertificate {
  readonly certFile: string;
  readonly keyFile: string;
  readonly caFile: string;
  readonly notAfter: Date;
}

/**
 * Issues a member's certificate: a node's names `warren-node:<id>` and serves (server
 * authentication only: it cannot call another node); a gateway's names
 * `warren-gateway:<name>` and connects (client authentication only). Writes the key (0600),
 * the certificate and a copy of the CA certificate into `outDir` (0700), the files a
 * member's WARREN_CLUSTER_TLS_DIR holds. Issuing again replaces them (a renewal).
 */
export async function issueClusterCertificate(options: IssueOptions): Promise<IssuedCertificate> {
  const { identity } = options;
  const now = options.now ?? new Date();
  const days = options.days ?? DEFAULT_VALIDITY_DAYS;
  if (!Number.isInteger(days) || days < 1 || days > CA_VALIDITY_DAYS) {
    throw new WarrenError("invalid_argument", `validity ${days} days: 1 to ${CA_VALIDITY_DAYS}`);
  }
  let uri: string;
  try {
    uri = identityUri(identity);
  } catch (err) {
    throw new WarrenError("invalid_argument", (err as Error).message);
  }
  const ca = await loadCa(options.caDir);
  const x509 = await loadX509();
  const keys = await webcrypto.subtle.generateKey(ALGORITHM, true, ["sign", "verify"]);
  const notAfter = new Date(
    Math.min(now.getTime() + days * DAY_MS, new Date(ca.certificate.validTo).getTime()),
  );
  const usage =
    identity.role === "node" ? x509.ExtendedKeyUsage.serverAuth : x509.ExtendedKeyUsage.clientAuth;
  const leaf = await x509.X509CertificateGenerator.create({
    serialNumber: serial(),
    subject: `CN=${uri}, O=Warren`,
    issuer: new x509.X509Certificate(ca.pem).subject,
    notBefore: new Date(now.getTime() - 60_000),
    notAfter,
    signingKey: ca.signingKey,
    publicKey: keys.publicKey,
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([usage]),
      new x509.SubjectAlternativeNameExtension([{ type: "url", value: uri }], true),
      await x509.AuthorityKeyIdentifierExtension.create(ca.publicKey),
    ],
  });
  await mkdir(options.outDir, { recursive: true, mode: 0o700 });
  const files = MEMBER_FILES[identity.role];
  const keyFile = join(options.outDir, files.key);
  const certFile = join(options.outDir, files.cert);
  const caFile = join(options.outDir, CA_FILES.cert);
  await writeAtomically(keyFile, await pkcs8Pem(keys.privateKey), 0o600);
  await writeAtomically(certFile, `${leaf.toString("pem")}\n`, 0o644);
  await writeAtomically(caFile, `${ca.pem}\n`, 0o644);
  return { certFile, keyFile, caFile, notAfter };
}

async function loadCa(dir: string) {
  const read = (name: string) =>
    readFile(join(dir, name), "utf8").catch((err: NodeJS.ErrnoException) => {
      throw new WarrenError(
        "invalid_argument",
        `cannot read ${join(dir, name)} (${err.code}): make the cluster CA first (warren cluster init-ca ${dir})`,
      );
    });
  const [pem, keyPem] = await Promise.all([read(CA_FILES.cert), read(CA_FILES.key)]);
  const certificate = new X509Certificate(pem);
  const key = createPrivateKey(keyPem);
  if (!certificate.checkPrivateKey(key) || !certificate.ca) {
    throw new WarrenError("invalid_argument", `${dir} holds no CA certificate with its key`);
  }
  return signingCa(pem, key);
}
