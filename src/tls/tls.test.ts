import "reflect-metadata"; // @peculiar/x509 needs it first (as local-ca.ts loads it)
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createPrivateKey, webcrypto, X509Certificate } from "node:crypto";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it, type TestContext } from "node:test";
import { connect } from "node:tls";
import { promisify } from "node:util";
import * as x509 from "@peculiar/x509";
import { silentLogger } from "../shared/index.js";
import { ensureLocalCertificate } from "./local-ca.js";
import { CertificateKeeper, loadCertificateFiles } from "./tls-identity.js";

const DAY_MS = 86_400_000;
const execFileP = promisify(execFile);

async function tempDir(t: TestContext): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "warren-tls-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** A TLS handshake to `server` for `servername`, trusting `ca` alone: the error, if any. */
function handshake(server: Server, servername: string, ca: string): Promise<string | undefined> {
  const { port } = server.address() as AddressInfo;
  return new Promise((resolve) => {
    const name = servername === "" ? {} : { servername };
    const socket = connect({ host: "127.0.0.1", port, ...name, ca }, () => {
      socket.end();
      resolve(undefined);
    });
    socket.on("error", (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
}

async function serve(t: TestContext, cert: string, key: string): Promise<Server> {
  const server = createServer({ cert, key }, (_req, res) => res.end("ok"));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => new Promise((resolve) => server.close(resolve)));
  return server;
}

it("makes a CA once and a wildcard certificate from it that clients trusting the CA accept", async (t) => {
  const dir = await tempDir(t);
  const first = await ensureLocalCertificate({ dir, domain: "warren.test" });
  assert.equal(first.issued, true);
  assert.equal(first.caFile, join(dir, "ca.crt"));
  for (const [name, mode] of [
    ["ca.key", 0o600],
    ["server.key", 0o600],
    ["ca.crt", 0o644],
    ["server.crt", 0o644],
  ] as const) {
    assert.equal((await stat(join(dir, name))).mode & 0o777, mode, name);
  }
  const ca = await readFile(first.caFile, "utf8");
  const server = await serve(t, first.cert, first.key);
  assert.equal(await handshake(server, "api.warren.test", ca), undefined);
  assert.equal(await handshake(server, "49983-abc123.warren.test", ca), undefined);
  assert.equal(await handshake(server, "api.other.test", ca), "ERR_TLS_CERT_ALTNAME_INVALID");
  assert.equal(
    await handshake(server, "api.warren.test", (await ensureOtherCa(t)).ca),
    "SELF_SIGNED_CERT_IN_CHAIN",
    "another CA does not vouch for it",
  );
  const leaf = new X509Certificate(first.cert);
  assert.ok(leaf.subjectAltName?.includes("DNS:*.warren.test"));
  assert.ok(first.notAfter.getTime() - Date.now() <= 90 * DAY_MS);

  const again = await ensureLocalCertificate({ dir, domain: "warren.test" });
  assert.equal(again.issued, false, "kept while valid");
  assert.equal(again.cert, first.cert);
});

async function ensureOtherCa(t: TestContext) {
  const dir = await tempDir(t);
  const other = await ensureLocalCertificate({ dir, domain: "warren.test" });
  return { ...other, ca: await readFile(other.caFile, "utf8") };
}

it("issues the certificate again near its expiry, from the same CA", async (t) => {
  const dir = await tempDir(t);
  const first = await ensureLocalCertificate({ dir, domain: "warren.test" });
  const ca = await readFile(first.caFile, "utf8");
  const later = await ensureLocalCertificate({
    dir,
    domain: "warren.test",
    now: () => new Date(Date.now() + 61 * DAY_MS),
  });
  assert.equal(later.issued, true, "within 30 days of its end");
  assert.equal(later.caReplaced, undefined);
  assert.ok(later.notAfter > first.notAfter);
  assert.equal(await readFile(later.caFile, "utf8"), ca, "the CA clients trust stays");
});

/** The CA's name constraints extension (2.5.29.30): critical?, and each subtree's base. */
function nameConstraints(caPem: string): {
  critical: boolean;
  permitted: string[];
  excluded: string[];
} {
  const ext = new x509.X509Certificate(caPem).getExtension("2.5.29.30");
  assert.ok(ext, "the CA carries name constraints");
  const [outer] = derItems(Buffer.from(ext.value));
  const subtrees = (tag: number) =>
    derItems(derItems(outer?.value ?? Buffer.alloc(0)).find((i) => i.tag === tag)?.value)
      .map((subtree) => derItems(subtree.value)[0])
      .map((base) =>
        base?.tag === 0x82
          ? `DNS:${base.value.toString("ascii")}`
          : `IP:${base?.value.toString("hex")}`,
      );
  return { critical: ext.critical, permitted: subtrees(0xa0), excluded: subtrees(0xa1) };
}

/** The TLV items of a DER buffer, one level deep. */
function derItems(der: Buffer | undefined): { tag: number; value: Buffer }[] {
  const items: { tag: number; value: Buffer }[] = [];
  for (let at = 0; der !== undefined && at < der.length; ) {
    const tag = der[at] as number;
    let length = der[at + 1] as number;
    let start = at + 2;
    if (length & 0x80) {
      const bytes = length & 0x7f;
      length = der.readUIntBE(start, bytes);
      start += bytes;
    }
    items.push({ tag, value: der.subarray(start, start + length) });
    at = start + length;
  }
  return items;
}

/** A server certificate for `names` signed with the CA in `dir` (as whoever held its key could). */
async function mintWithCa(dir: string, names: string[]): Promise<{ cert: string; key: string }> {
  const algorithm = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" };
  const caPem = await readFile(join(dir, "ca.crt"), "utf8");
  const caKey = await webcrypto.subtle.importKey(
    "pkcs8",
    createPrivateKey(await readFile(join(dir, "ca.key"), "utf8")).export({
      type: "pkcs8",
      format: "der",
    }),
    algorithm,
    false,
    ["sign"],
  );
  const keys = await webcrypto.subtle.generateKey(algorithm, true, ["sign", "verify"]);
  const leaf = await x509.X509CertificateGenerator.create({
    serialNumber: "0badc0de",
    subject: `CN=${names[0]}`,
    issuer: new x509.X509Certificate(caPem).subject,
    notBefore: new Date(Date.now() - 60_000),
    notAfter: new Date(Date.now() + DAY_MS),
    signingKey: caKey,
    publicKey: keys.publicKey,
    signingAlgorithm: algorithm,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(
        names.map((value) => ({ type: /^[\d.]+$/.test(value) ? "ip" : "dns", value })),
      ),
    ],
  });
  const der = Buffer.from(await webcrypto.subtle.exportKey("pkcs8", keys.privateKey));
  const key = createPrivateKey({ key: der, format: "der", type: "pkcs8" });
  return {
    cert: `${leaf.toString("pem")}\n${caPem}`,
    key: key.export({ type: "pkcs8", format: "pem" }).toString(),
  };
}

it("the CA vouches for the domain's names alone: critical name constraints, so what it signs for another name fails verification", async (t) => {
  const dir = await tempDir(t);
  const made = await ensureLocalCertificate({ dir, domain: "warren.test" });
  const ca = await readFile(made.caFile, "utf8");
  assert.deepEqual(nameConstraints(ca), {
    critical: true,
    permitted: ["DNS:warren.test"],
    excluded: [`IP:${"00".repeat(8)}`, `IP:${"00".repeat(32)}`],
  });
  // Whoever got hold of ca.key: a certificate for any other name is refused by clients
  // trusting the CA. Node names OpenSSL's name-constraint errors "UNSPECIFIED"; OpenSSL's
  // own verification (below) says which.
  const evil = await mintWithCa(dir, ["bank.example", "warren.test.evil"]);
  const evilServer = await serve(t, evil.cert, evil.key);
  assert.equal(await handshake(evilServer, "bank.example", ca), "UNSPECIFIED");
  assert.equal(await handshake(evilServer, "warren.test.evil", ca), "UNSPECIFIED");
  const byAddress = await mintWithCa(dir, ["x.warren.test", "127.0.0.1"]);
  const byAddressServer = await serve(t, byAddress.cert, byAddress.key);
  assert.equal(await handshake(byAddressServer, "", ca), "UNSPECIFIED", "no IP address either");
  // The same minting for the domain's own names passes: the constraint is what refuses.
  const own = await mintWithCa(dir, ["deep.api.warren.test"]);
  assert.equal(
    await handshake(await serve(t, own.cert, own.key), "deep.api.warren.test", ca),
    undefined,
  );

  const verify = async (chain: string) => {
    await writeFile(join(dir, "leaf.pem"), chain);
    const args = ["verify", "-CAfile", made.caFile, join(dir, "leaf.pem")];
    return execFileP("openssl", args).then(
      ({ stdout }) => stdout.trim(),
      (err: NodeJS.ErrnoException & { stdout?: string; stderr?: string }) =>
        err.code === "ENOENT" ? undefined : `${err.stdout ?? ""}${err.stderr ?? ""}`.trim(),
    );
  };
  const verdict = await verify(evil.cert);
  if (verdict === undefined) {
    t.diagnostic("openssl is not installed: its verification was not checked");
    return;
  }
  assert.match(verdict, /permitted subtree violation/);
  assert.match((await verify(byAddress.cert)) ?? "", /excluded subtree violation/);
  assert.match((await verify(own.cert)) ?? "", /: OK$/);
});

it("replaces a CA that may sign any name (an older install's) or another domain's: new key, old one gone", async (t) => {
  const dir = await tempDir(t);
  // What Warren made before name constraints: a CA for any name.
  const oldKeys = await webcrypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, [
    "sign",
    "verify",
  ]);
  const unconstrained = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: "01",
    name: "CN=Warren local CA (old), O=Warren",
    notBefore: new Date(Date.now() - 60_000),
    notAfter: new Date(Date.now() + 3650 * DAY_MS),
    keys: oldKeys,
    signingAlgorithm: { name: "ECDSA", hash: "SHA-256" },
    extensions: [new x509.BasicConstraintsExtension(true, 0, true)],
  });
  const oldKey = createPrivateKey({
    key: Buffer.from(await webcrypto.subtle.exportKey("pkcs8", oldKeys.privateKey)),
    format: "der",
    type: "pkcs8",
  })
    .export({ type: "pkcs8", format: "pem" })
    .toString();
  await writeFile(join(dir, "ca.crt"), unconstrained.toString("pem"));
  await writeFile(join(dir, "ca.key"), oldKey, { mode: 0o600 });

  const replaced = await ensureLocalCertificate({ dir, domain: "warren.test" });
  assert.equal(replaced.issued, true);
  assert.equal(replaced.caReplaced, "the CA had no name constraints");
  const ca = await readFile(replaced.caFile, "utf8");
  assert.notEqual(ca.trim(), unconstrained.toString("pem").trim());
  assert.notEqual(await readFile(join(dir, "ca.key"), "utf8"), oldKey, "the old key is gone");
  assert.deepEqual(nameConstraints(ca).permitted, ["DNS:warren.test"]);
  const server = await serve(t, replaced.cert, replaced.key);
  assert.equal(await handshake(server, "api.warren.test", ca), undefined);
  const kept = await ensureLocalCertificate({ dir, domain: "warren.test" });
  assert.deepEqual([kept.issued, kept.caReplaced], [false, undefined], "kept from then on");

  // Another domain: a CA of its own (the old one cannot vouch for it).
  const moved = await ensureLocalCertificate({ dir, domain: "sbx.example.test" });
  assert.equal(moved.caReplaced, "the CA is for another domain");
  const movedCa = await readFile(moved.caFile, "utf8");
  assert.deepEqual(nameConstraints(movedCa).permitted, ["DNS:sbx.example.test"]);
  const movedServer = await serve(t, moved.cert, moved.key);
  assert.equal(await handshake(movedServer, "api.sbx.example.test", movedCa), undefined);
  assert.equal(
    await handshake(movedServer, "api.sbx.example.test", ca),
    "SELF_SIGNED_CERT_IN_CHAIN",
    "the first domain's CA does not vouch for it",
  );
});

it("checks an operator's certificate: its key, and that it covers the domain", async (t) => {
  const dir = await tempDir(t);
  const made = await ensureLocalCertificate({ dir, domain: "warren.test" });
  const other = await ensureOtherCa(t);
  const files = join(dir, "operator");
  await writeFile(`${files}.crt`, made.cert);
  await writeFile(`${files}.key`, made.key);
  await writeFile(`${files}-wrong.key`, other.key);
  const loaded = await loadCertificateFiles(`${files}.crt`, `${files}.key`, "warren.test");
  assert.equal(loaded.cert, made.cert);
  await assert.rejects(loadCertificateFiles(`${files}.crt`, `${files}-wrong.key`, "warren.test"), {
    message: /is not the key of/,
  });
  await assert.rejects(loadCertificateFiles(`${files}.crt`, `${files}.key`, "example.org"), {
    message: /does not cover api\.example\.org/,
  });
  await assert.rejects(loadCertificateFiles(`${files}.key`, `${files}.key`, "warren.test"), {
    message: /is not a PEM certificate/,
  });
  await assert.rejects(loadCertificateFiles(join(dir, "missing"), `${files}.key`, "warren.test"), {
    message: /cannot read the TLS certificate .*ENOENT/,
  });
});

it("reloads the operator's files when they change, and keeps the old ones if the new do not load", async (t) => {
  const dir = await tempDir(t);
  const first = await ensureLocalCertificate({ dir, domain: "warren.test" });
  const cert = join(dir, "op.crt");
  const key = join(dir, "op.key");
  await writeFile(cert, first.cert);
  await writeFile(key, first.key);
  const changes: string[] = [];
  const keeper = await CertificateKeeper.start({
    source: { kind: "files", certFile: cert, keyFile: key },
    domain: "warren.test",
    onChange: (identity) => changes.push(identity.cert),
    logger: silentLogger,
    checkMs: 3_600_000,
  });
  t.after(() => keeper.stop());
  assert.equal(await keeper.check(), false, "unchanged files");
  const next = await ensureLocalCertificate({ dir: join(dir, "next"), domain: "warren.test" });
  await writeFile(key, next.key);
  await assert.rejects(keeper.check(), { message: /is not the key of/ }, "half-replaced");
  assert.equal(keeper.current.cert, first.cert, "the working certificate stays");
  await writeFile(cert, next.cert);
  assert.equal(await keeper.check(), true);
  assert.deepEqual(changes, [next.cert]);
  assert.equal(keeper.current.key, next.key);
});
