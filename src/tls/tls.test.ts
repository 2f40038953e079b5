import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it, type TestContext } from "node:test";
import { connect } from "node:tls";
import { silentLogger } from "../shared/index.js";
import { ensureLocalCertificate } from "./local-ca.js";
import { CertificateKeeper, loadCertificateFiles } from "./tls-identity.js";

const DAY_MS = 86_400_000;

async function tempDir(t: TestContext): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "warren-tls-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** A TLS handshake to `server` for `servername`, trusting `ca` alone: the error, if any. */
function handshake(server: Server, servername: string, ca: string): Promise<string | undefined> {
  const { port } = server.address() as AddressInfo;
  return new Promise((resolve) => {
    const socket = connect({ host: "127.0.0.1", port, servername, ca }, () => {
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

it("issues the certificate again near its expiry or for another domain, from the same CA", async (t) => {
  const dir = await tempDir(t);
  const first = await ensureLocalCertificate({ dir, domain: "warren.test" });
  const ca = await readFile(first.caFile, "utf8");
  const later = await ensureLocalCertificate({
    dir,
    domain: "warren.test",
    now: () => new Date(Date.now() + 61 * DAY_MS),
  });
  assert.equal(later.issued, true, "within 30 days of its end");
  assert.ok(later.notAfter > first.notAfter);
  assert.equal(await readFile(later.caFile, "utf8"), ca, "the CA clients trust stays");
  const moved = await ensureLocalCertificate({ dir, domain: "sbx.example.test" });
  assert.equal(moved.issued, true);
  const server = await serve(t, moved.cert, moved.key);
  assert.equal(await handshake(server, "api.sbx.example.test", ca), undefined);
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
