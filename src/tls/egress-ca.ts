import { createPrivateKey, webcrypto, X509Certificate } from "node:crypto";
import { mkdir, readFile } from "node:fs/promises";
import { hostname } from "node:os";
import { join } from "node:path";
import { createSecureContext, type SecureContext } from "node:tls";
import {
  ALGORITHM,
  type CryptoKey,
  createCa,
  DAY_MS,
  issueServerCertificate,
  pkcs8Pem,
  type SigningCa,
  signingCa,
} from "./certificate-kit.js";

const CA_VALIDITY_DAYS = 3650;
/** Leaves live a week and are issued again a day before they end. */
const LEAF_VALIDITY_MS = 7 * DAY_MS;
const LEAF_RENEW_MS = 6 * DAY_MS;
/** Names whose certificates are kept at once; the oldest goes first. */
const MAX_LEAVES = 1024;

export const EGRESS_CA_FILES = { cert: "ca.crt", key: "ca.key" } as const;

/** A leaf's chain (the leaf, then the CA) and its key, PEM. */
export interface LeafCertificate {
  readonly cert: string;
  readonly key: string;
}

interface IssuedLeaf {
  readonly at: number;
  readonly pem: Promise<LeafCertificate>;
  readonly context: Promise<SecureContext>;
}

/**
 * The node's egress CA (`<data dir>/egress-ca`: `ca.crt`, `ca.key` 0600, made once): what
 * the egress gate shows a sandbox when it terminates TLS for a domain with header rules.
 * Every sandbox trusts it (envd installs `ca.crt` at /init); nothing else should. Unlike
 * domain mode's CA it has no name constraints — rules name any domain — so its key never
 * leaves the node and no certificate it issues is for anyone but a sandbox's gate.
 */
export class EgressCa {
  readonly #ca: SigningCa;
  /** One key for every leaf: only the server holds it, a fresh one per name buys nothing. */
  readonly #leafKeys: { publicKey: CryptoKey; keyPem: string };
  readonly #leaves = new Map<string, IssuedLeaf>();

  private constructor(ca: SigningCa, leafKeys: { publicKey: CryptoKey; keyPem: string }) {
    this.#ca = ca;
    this.#leafKeys = leafKeys;
  }

  /** Loads the CA from `dir`, or makes it there first. */
  static async open(dir: string): Promise<EgressCa> {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const ca = (await load(dir)) ?? (await create(dir));
    const keys = await webcrypto.subtle.generateKey(ALGORITHM, true, ["sign", "verify"]);
    return new EgressCa(ca, { publicKey: keys.publicKey, keyPem: await pkcs8Pem(keys.privateKey) });
  }

  /** The CA certificate sandboxes trust (PEM). */
  get certificate(): string {
    return `${this.#ca.pem}\n`;
  }

  /** A TLS context presenting a certificate for `name` (issued once, reused for days). */
  contextFor(name: string): Promise<SecureContext> {
    return this.#leaf(name).context;
  }

  /**
   * The certificate chain and key for `name` (PEM), as `contextFor` presents them: for a gate
   * in another process (the guest services), which never holds the CA's key.
   */
  leafFor(name: string): Promise<LeafCertificate> {
    return this.#leaf(name).pem;
  }

  #leaf(name: string): IssuedLeaf {
    const now = Date.now();
    const known = this.#leaves.get(name);
    if (known && now - known.at < LEAF_RENEW_MS) return known;
    const pem = this.#issue(name, new Date(now));
    const leaf: IssuedLeaf = { at: now, pem, context: pem.then((p) => createSecureContext(p)) };
    this.#leaves.delete(name);
    this.#leaves.set(name, leaf);
    if (this.#leaves.size > MAX_LEAVES) {
      this.#leaves.delete(this.#leaves.keys().next().value as string);
    }
    leaf.context.catch(() => {
      if (this.#leaves.get(name) === leaf) this.#leaves.delete(name);
    });
    return leaf;
  }

  async #issue(name: string, now: Date): Promise<LeafCertificate> {
    const notAfter = new Date(
      Math.min(now.getTime() + LEAF_VALIDITY_MS, new Date(this.#ca.certificate.validTo).getTime()),
    );
    const leaf = await issueServerCertificate(
      this.#ca,
      this.#leafKeys.publicKey,
      [name],
      now,
      notAfter,
    );
    return { cert: `${leaf}\n${this.#ca.pem}\n`, key: this.#leafKeys.keyPem };
  }
}

async function load(dir: string): Promise<SigningCa | undefined> {
  const [pem, keyPem] = await Promise.all(
    [EGRESS_CA_FILES.cert, EGRESS_CA_FILES.key].map((name) =>
      readFile(join(dir, name), "utf8").catch(() => undefined),
    ),
  );
  if (pem === undefined || keyPem === undefined) return undefined;
  try {
    const key = createPrivateKey(keyPem);
    const certificate = new X509Certificate(pem);
    // Unusable (another key, expired): made again; sandboxes get the new one at their /init.
    const current = new Date(certificate.validTo).getTime() > Date.now() + 30 * DAY_MS;
    if (!certificate.ca || !certificate.checkPrivateKey(key) || !current) return undefined;
    return await signingCa(pem, key);
  } catch {
    return undefined;
  }
}

function create(dir: string): Promise<SigningCa> {
  return createCa({
    name: `Warren egress CA (${hostname()})`,
    now: new Date(),
    validityDays: CA_VALIDITY_DAYS,
    keyFile: join(dir, EGRESS_CA_FILES.key),
    certFile: join(dir, EGRESS_CA_FILES.cert),
    crlSign: true,
    serverAuthOnly: true,
  });
}
