import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { ENVD_PORT } from "../../../src/protocol/index.js";
import type { FakeRouter } from "../../fakes/fake-router.js";
import { closeAll, closeServer, frontServer, listen, send } from "./harness.js";

// `network.httpsPorts`: the proxy speaks TLS to those guest ports, whatever certificate the
// guest's server shows (a self-signed one here), and plain HTTP to the others.

const dir = mkdtempSync(join(tmpdir(), "warren-https-ports-"));
let proxyPort: number;
let router: FakeRouter;
let tlsPort: number;
let closeTls = async () => {};

before(async () => {
  execFileSync(
    "openssl",
    [
      ...["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"],
      ...["-subj", "/CN=guest", "-days", "1"],
      ...["-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem")],
    ],
    { stdio: "ignore" },
  );
  const server = createServer(
    { key: readFileSync(join(dir, "key.pem")), cert: readFileSync(join(dir, "cert.pem")) },
    (req, res) => {
      res.writeHead(200, { "content-type": "text/plain" });
      res.end(`tls ${req.method} ${req.url} host=${req.headers.host}`);
    },
  );
  tlsPort = await listen(server);
  closeTls = () => closeServer(server);
  ({ port: proxyPort, router } = await frontServer());
  router.add("secure", {
    ports: { [ENVD_PORT]: tlsPort, 8443: tlsPort, 8444: tlsPort },
    httpsPorts: [8443],
  });
});

after(async () => {
  await closeTls();
  await closeAll();
  rmSync(dir, { recursive: true, force: true });
});

test("reaches an HTTPS guest port over TLS, keeping the request's path and Host", async () => {
  for (let i = 0; i < 2; i++) {
    const res = await send(proxyPort, {
      path: "/x?y=1",
      headers: { host: "8443-secure.example.test" },
    });
    assert.equal(res.status, 200);
    assert.equal(res.body, "tls GET /x?y=1 host=8443-secure.example.test");
  }
});

test("a port not in httpsPorts is plain HTTP: a TLS server there is a bad gateway", async () => {
  const res = await send(proxyPort, { headers: { host: "8444-secure.example.test" } });
  assert.equal(res.status, 502);
});
