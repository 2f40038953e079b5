// Secrets injected as headers (network.rules) through the real e2b SDK and a real guest: a
// Secret, a sandbox whose rules set `Authorization: Bearer ${Secret.fill(name)}` for
// api.ruled.test, and curl in the guest reaching the fake internet's HTTPS server by that
// name. The server sees the secret; the guest never does (env, files, /proc). Names resolve
// through a DNS server of the test's own; the server's certificate comes from a CA of the
// test's own, trusted by Warren through WARREN_EGRESS_TRUSTED_CA. Nothing leaves this machine.
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Sandbox, Secret } from "e2b";
import { startFakeDns } from "../helpers/fake-dns-server.js";
import { FAKENET, FakeNet } from "../helpers/network/fake-net.js";
import { useServer } from "../helpers/server.js";
import { createTestCa } from "../helpers/test-ca.js";

const NET_PORT = 9090;
const HTTPS_PORT = 8443;
const { public1 } = FAKENET;
const dns = await startFakeDns((name) => (name.endsWith(".ruled.test") ? public1 : undefined));
const upstreamCa = createTestCa("test upstream CA");
const caFile = join(mkdtempSync(join(tmpdir(), "warren-test-upstream-ca-")), "ca.pem");
writeFileSync(caFile, upstreamCa.cert);
useServer({
  WARREN_EGRESS_RESOLVER: `127.0.0.1:${dns.port}`,
  WARREN_EGRESS_TRUSTED_CA: caFile,
});

const SECRET_NAME = `upstream-key-${Date.now()}`;
const VALUE = `sk-e2e-${Date.now()}-never-in-the-guest`;
const URL = `https://api.ruled.test:${HTTPS_PORT}/v1/models`;

describe("secrets as headers at egress (e2b SDK, real guest)", () => {
  let net: FakeNet;
  let sandbox: Sandbox;

  before(async () => {
    net = await FakeNet.start(NET_PORT);
    assert.ok((await net.agent.listenHttps(HTTPS_PORT, upstreamCa.issue("api.ruled.test"))).ok);
    await Secret.create(SECRET_NAME, VALUE);
    sandbox = await Sandbox.create({
      network: {
        allowOut: ["*.ruled.test"],
        denyOut: ["0.0.0.0/0"],
        rules: {
          "api.ruled.test": [
            { transform: { headers: { Authorization: `Bearer ${Secret.fill(SECRET_NAME)}` } } },
          ],
        },
      },
    });
  });

  after(async () => {
    await sandbox?.kill().catch(() => false);
    await Secret.destroy(SECRET_NAME).catch(() => false);
    await net?.close();
    dns.close();
  });

  const run = async (command: string) =>
    (await sandbox.commands.run(command, { timeoutMs: 60_000 })).stdout.trim();

  it("the upstream gets the secret; curl and Python trust the gate's certificate", async () => {
    const info = await sandbox.getInfo();
    assert.deepEqual(info.network?.rules, {
      "api.ruled.test": [
        { transform: { headers: { Authorization: `Bearer \${e2b.secrets.${SECRET_NAME}}` } } },
      ],
    });
    await net.agent.seen();
    assert.equal(await run(`curl -sS --max-time 20 ${URL}`), "ok");
    assert.equal(
      await run(
        `python3 -c 'import urllib.request; print(urllib.request.urlopen("${URL}").read().decode())'`,
      ),
      "ok",
    );
    const seen = await net.agent.seen();
    assert.equal(seen.length, 2);
    for (const request of seen) {
      assert.equal(request.headers.authorization, `Bearer ${VALUE}`);
      assert.equal(request.url, "/v1/models");
    }
  });

  it("the guest sees nothing of it: env, files, /proc", async () => {
    const probes = [
      "env",
      "cat /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n'",
      `grep -rs --binary-files=text -l '${VALUE}' /etc /root /home /tmp /var /usr/local /run 2>/dev/null; true`,
      `curl -sS -v --max-time 20 ${URL} 2>&1`,
    ];
    for (const probe of probes) {
      const out = await run(probe);
      assert.ok(out.length > 0 || probe.startsWith("grep"), `${probe} printed something`);
      assert.ok(!out.includes(VALUE), `${probe} shows the secret`);
    }
  });

  it("a rule naming a secret the team lacks fails the request clearly; rules change live", async () => {
    await sandbox.updateNetwork({
      allowOut: ["*.ruled.test"],
      denyOut: ["0.0.0.0/0"],
      rules: { "api.ruled.test": [{ transform: { headers: { "x-key": Secret.fill("nope") } } }] },
    });
    await net.agent.seen();
    const answer = await run(`curl -sS --max-time 20 -w ' %{http_code}' ${URL}`);
    assert.match(answer, /secret "nope", which this sandbox's team does not have.* 502$/s);
    assert.deepEqual(await net.agent.seen(), []);
    await sandbox.updateNetwork({ allowOut: ["*.ruled.test"], denyOut: ["0.0.0.0/0"] });
    assert.equal((await sandbox.getInfo()).network?.rules, undefined);
    // No rule: the guest's TLS goes to the server itself, whose CA the guest does not trust.
    assert.match(await run(`curl -sS --max-time 20 ${URL} 2>&1; true`), /certificate/i);
  });
});
