import { X509Certificate } from "node:crypto";
import { appendFile, mkdir, readFile, realpath, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { WarrenError } from "../shared/index.js";

/** More than a few CA certificates: bounds what one /init can make envd write. */
const MAX_PEM_BYTES = 64 * 1024;
const BLOCK = /-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]+-----END CERTIFICATE-----/g;

/** Where the certificates go: a file `update-ca-certificates` keeps, and the bundles in use. */
export const TRUST_FILES = {
  anchor: "/usr/local/share/ca-certificates/warren-egress.crt",
  /** Debian/Ubuntu/Alpine, then Fedora/RHEL. The first found is what clients are pointed at. */
  bundles: ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"],
} as const;

/** /init's `caCertificates`: undefined when absent, else PEM certificates, each one parsed. */
export function parseCaCertificates(value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string" || Buffer.byteLength(value) > MAX_PEM_BYTES) {
    throw invalid(`caCertificates must be PEM certificates, at most ${MAX_PEM_BYTES} bytes`);
  }
  const blocks = value.match(BLOCK) ?? [];
  if (blocks.length === 0) throw invalid("caCertificates holds no PEM certificate");
  for (const block of blocks) {
    try {
      if (!new X509Certificate(block).ca) throw new Error("not a CA");
    } catch (err) {
      throw invalid(`caCertificates: a certificate is not a usable CA (${(err as Error).message})`);
    }
  }
  return `${blocks.join("\n")}\n`;
}

/** What a guest's clients need to be told to trust what was installed. */
export interface InstalledTrust {
  /** The certificates alone (Node: NODE_EXTRA_CA_CERTS adds them to its own roots). */
  readonly anchor: string;
  /** The system bundle they were added to (Python's requests, which keeps its own otherwise). */
  readonly bundle?: string;
}

/**
 * Adds CA certificates to the guest's trust: written as a local anchor (kept by a later
 * `update-ca-certificates`) and appended to each system bundle that lacks them, so OpenSSL,
 * curl, Python and git trust them at once. `root` is `/` (a test's directory elsewhere).
 */
export async function installCaCertificates(pem: string, root = "/"): Promise<InstalledTrust> {
  const at = (path: string) => join(root, path);
  const anchor = at(TRUST_FILES.anchor);
  if ((await readFile(anchor, "utf8").catch(() => "")) !== pem) {
    await mkdir(dirname(anchor), { recursive: true, mode: 0o755 });
    await writeFile(anchor, pem, { mode: 0o644 });
  }
  let first: string | undefined;
  const seen = new Set<string>();
  for (const bundle of TRUST_FILES.bundles.map(at)) {
    const real = await realpath(bundle).catch(() => undefined);
    if (real === undefined || seen.has(real)) continue;
    seen.add(real);
    first ??= bundle;
    const text = await readFile(real, "utf8");
    const missing = (pem.match(BLOCK) ?? []).filter((block) => !text.includes(block));
    if (missing.length > 0) {
      await appendFile(real, `${text.endsWith("\n") ? "" : "\n"}${missing.join("\n")}\n`);
    }
  }
  return { anchor, ...(first && { bundle: first }) };
}

/** Env vars that make clients with roots of their own trust what was installed (unless set). */
export function trustEnvVars(trust: InstalledTrust): Record<string, string> {
  return {
    NODE_EXTRA_CA_CERTS: trust.anchor,
    ...(trust.bundle && { REQUESTS_CA_BUNDLE: trust.bundle }),
  };
}

function invalid(message: string): WarrenError {
  return new WarrenError("invalid_argument", message);
}
