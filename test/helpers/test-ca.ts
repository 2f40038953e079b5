import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A certificate and its key, PEM. */
export interface TestCertificate {
  readonly cert: string;
  readonly key: string;
}

/** A certificate authority of a test's own (openssl, ECDSA P-256, a day long). */
export interface TestCa extends TestCertificate {
  /** A server certificate for DNS `names` signed by this CA (cert is leaf then CA). */
  issue(...names: string[]): TestCertificate;
}

export function createTestCa(commonName: string): TestCa {
  const ca = inTempDir((dir) => {
    openssl(dir, [
      ...["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"],
      ...["-subj", `/CN=${commonName}`, "-days", "1", "-keyout", "key.pem", "-out", "cert.pem"],
      ...["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=keyCertSign"],
    ]);
    return read(dir);
  });
  return {
    ...ca,
    issue: (...names) =>
      inTempDir((dir) => {
        writeFileSync(join(dir, "ca.pem"), ca.cert);
        writeFileSync(join(dir, "ca.key"), ca.key);
        writeFileSync(
          join(dir, "ext.cnf"),
          `subjectAltName=${names.map((n) => `DNS:${n}`).join(",")}\nextendedKeyUsage=serverAuth\n`,
        );
        openssl(dir, [
          ...["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"],
          ...["-subj", `/CN=${names[0]}`, "-keyout", "key.pem", "-out", "req.pem"],
        ]);
        openssl(dir, [
          ...["x509", "-req", "-in", "req.pem", "-CA", "ca.pem", "-CAkey", "ca.key"],
          ...["-CAcreateserial", "-days", "1", "-extfile", "ext.cnf", "-out", "cert.pem"],
        ]);
        const leaf = read(dir);
        return { key: leaf.key, cert: `${leaf.cert}${ca.cert}` };
      }),
  };
}

function inTempDir<T>(fn: (dir: string) => T): T {
  const dir = mkdtempSync(join(tmpdir(), "warren-test-ca-"));
  try {
    return fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function openssl(dir: string, args: string[]): void {
  execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
}

function read(dir: string): TestCertificate {
  return {
    cert: readFileSync(join(dir, "cert.pem"), "utf8"),
    key: readFileSync(join(dir, "key.pem"), "utf8"),
  };
}
