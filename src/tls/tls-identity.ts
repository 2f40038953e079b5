import { createPrivateKey, X509Certificate } from "node:crypto";
import { readFile, stat } from "node:fs/promises";
import { type Logger, WarrenError } from "../shared/index.js";
import { ensureLocalCertificate, renewalDue } from "./local-ca.js";

/** A server certificate (PEM, with its chain) and its key (PEM). */
export interface TlsIdentity {
  readonly cert: string;
  readonly key: string;
  readonly notAfter: Date;
}

/** Where the certificate comes from: the operator's files, or Warren's own local CA. */
export type CertificateSource =
  | { readonly kind: "files"; readonly certFile: string; readonly keyFile: string }
  | { readonly kind: "local-ca"; readonly dir: string };

/**
 * The operator's certificate and key (`WARREN_TLS_CERT`, `WARREN_TLS_KEY`), checked: they
 * must parse, match, and cover `api.<domain>` and `<port>-<id>.<domain>` (a wildcard).
 */
export async function loadCertificateFiles(
  certFile: string,
  keyFile: string,
  domain: string,
): Promise<TlsIdentity> {
  const read = (file: string, what: string) =>
    readFile(file, "utf8").catch((err: NodeJS.ErrnoException) => {
      throw new WarrenError("invalid_argument", `cannot read the TLS ${what} ${file}: ${err.code}`);
    });
  const [cert, key] = await Promise.all([read(certFile, "certificate"), read(keyFile, "key")]);
  let certificate: X509Certificate;
  try {
    certificate = new X509Certificate(cert);
  } catch {
    throw new WarrenError("invalid_argument", `${certFile} is not a PEM certificate`);
  }
  let matches: boolean;
  try {
    matches = certificate.checkPrivateKey(createPrivateKey(key));
  } catch {
    throw new WarrenError("invalid_argument", `${keyFile} is not a PEM private key`);
  }
  if (!matches)
    throw new WarrenError("invalid_argument", `${keyFile} is not the key of ${certFile}`);
  for (const host of [`api.${domain}`, `49983-sandbox.${domain}`]) {
    if (certificate.checkHost(host) === undefined) {
      throw new WarrenError(
        "invalid_argument",
        `${certFile} does not cover ${host}: WARREN_DOMAIN=${domain} needs a certificate for *.${domain}`,
      );
    }
  }
  return { cert, key, notAfter: new Date(certificate.validTo) };
}

export interface CertificateKeeperOptions {
  readonly source: CertificateSource;
  readonly domain: string;
  /** Called with the new certificate when it changed (renewed, or the files were replaced). */
  readonly onChange: (identity: TlsIdentity) => void;
  readonly logger: Logger;
  /** How often it looks (ms). Default an hour. */
  readonly checkMs?: number;
}

const CHECK_MS = 3_600_000;

/**
 * Keeps a TLS server's certificate current while it runs: Warren's own is issued again by
 * the local CA 30 days before it expires; the operator's files are read again when they
 * change (a renewal by certbot or cert-manager), and kept if the new ones do not load.
 */
export class CertificateKeeper {
  readonly #o: CertificateKeeperOptions;
  #current: TlsIdentity;
  #stamp: string;
  #timer: NodeJS.Timeout | undefined;
  /** Where clients find the CA to trust (the local CA only). */
  readonly caFile: string | undefined;

  private constructor(
    options: CertificateKeeperOptions,
    current: TlsIdentity,
    stamp: string,
    caFile?: string,
  ) {
    this.#o = options;
    this.#current = current;
    this.#stamp = stamp;
    this.caFile = caFile;
  }

  /** Loads (or issues) the certificate, then checks it every `checkMs`. */
  static async start(options: CertificateKeeperOptions): Promise<CertificateKeeper> {
    const { source, domain } = options;
    let keeper: CertificateKeeper;
    if (source.kind === "files") {
      const identity = await loadCertificateFiles(source.certFile, source.keyFile, domain);
      keeper = new CertificateKeeper(options, identity, await filesStamp(source));
    } else {
      const local = await ensureLocalCertificate({ dir: source.dir, domain });
      if (local.caReplaced) {
        // Clients that trusted the old ca.crt must be given the new one.
        options.logger.warn(
          { domain, ca: local.caFile, reason: local.caReplaced },
          "tls.ca_replaced",
        );
      }
      if (local.issued) {
        options.logger.info(
          { domain, notAfter: local.notAfter.toISOString(), ca: local.caFile },
          "tls.certificate_issued",
        );
      }
      keeper = new CertificateKeeper(options, local, local.notAfter.toISOString(), local.caFile);
    }
    keeper.#timer = setInterval(() => {
      keeper
        .check()
        .catch((err: unknown) => options.logger.warn({ err }, "tls.certificate_check_failed"));
    }, options.checkMs ?? CHECK_MS);
    keeper.#timer.unref();
    return keeper;
  }

  get current(): TlsIdentity {
    return this.#current;
  }

  /** Looks once: renews or reloads if due; true when the certificate changed. */
  async check(): Promise<boolean> {
    const { source, domain, logger } = this.#o;
    let next: TlsIdentity;
    let stamp: string;
    if (source.kind === "files") {
      stamp = await filesStamp(source);
      if (stamp === this.#stamp) return false;
      next = await loadCertificateFiles(source.certFile, source.keyFile, domain);
    } else {
      if (renewalDue(this.#current.notAfter).getTime() > Date.now()) return false;
      next = await ensureLocalCertificate({ dir: source.dir, domain });
      stamp = next.notAfter.toISOString();
    }
    this.#current = next;
    this.#stamp = stamp;
    logger.info({ domain, notAfter: next.notAfter.toISOString() }, "tls.certificate_changed");
    this.#o.onChange(next);
    return true;
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}

async function filesStamp(source: { certFile: string; keyFile: string }): Promise<string> {
  const [cert, key] = await Promise.all([stat(source.certFile), stat(source.keyFile)]);
  return `${cert.mtimeMs}:${cert.size}:${key.mtimeMs}:${key.size}`;
}
