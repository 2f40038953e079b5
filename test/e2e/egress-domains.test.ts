// Egress by domain through the real e2b SDK and a real guest: `allowOut: ['*.allowed.test']`
// with every address denied. Names resolve through a DNS server of the test's own (Warren's
// egress resolver here); the servers they name are on the fake internet (FakeNet), so
// nothing leaves this machine. The guest asks its own resolver (8.8.8.8, as written by
// Warren's init): the slot sends it to the egress gate — which runs in the guest services
// process, not the server, and comes back when that process dies.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Sandbox } from "e2b";
import { GATE_TCP_PORT } from "../../src/network/index.js";
import { startFakeDns } from "../helpers/fake-dns-server.js";
import { servicesPid, slotListeners } from "../helpers/guest-services.js";
import { selfSignedCertificate } from "../helpers/network/fake-dns.js";
import { FAKENET, FakeNet } from "../helpers/network/fake-net.js";
import { useServer, waitFor } from "../helpers/server.js";

const NET_PORT = 9090;
const TLS_PORT = 8443;
const { public1, public2 } = FAKENET;
const dns = await startFakeDns((name) =>
  name === "denied.test" ? public2 : name.endsWith(".allowed.test") ? public1 : undefined,
);
const server = useServer({ WARREN_EGRESS_RESOLVER: `127.0.0.1:${dns.port}` });

/** A TLS client in the guest: connects to `host` with SNI `sni`, prints the first line. */
const tlsClient = (host: string, sni: string) =>
  `python3 -c 'import socket,ssl,sys
c = ssl.create_default_context(); c.check_hostname = False; c.verify_mode = ssl.CERT_NONE
s = socket.create_connection((sys.argv[1], ${TLS_PORT}), timeout=8)
print(c.wrap_socket(s, server_hostname=sys.argv[2]).recv(200).decode().strip())' ${host} ${sni} 2>&1 | tail -1`;

describe("egress by domain (e2b SDK, real guest)", () => {
  let net: FakeNet;
  let sandbox: Sandbox;

  before(async () => {
    net = await FakeNet.start(NET_PORT);
    assert.ok(
      (await net.agent.listenTls(TLS_PORT, "fakenet-tls", selfSignedCertificate("fakenet"))).ok,
    );
    sandbox = await Sandbox.create({
      network: { allowOut: ["*.allowed.test"], denyOut: ["0.0.0.0/0"] },
    });
  });

  after(async () => {
    await sandbox?.kill().catch(() => false);
    await net?.close();
    dns.close();
  });

  const run = async (command: string) =>
    (await sandbox.commands.run(command, { timeoutMs: 60_000 })).stdout.trim();

  it("reaches an allowed name over HTTPS; no DNS answer and no connection for the rest", async () => {
    assert.deepEqual((await sandbox.getInfo()).network?.allowOut, ["*.allowed.test"]);
    assert.equal(await run("getent hosts api.allowed.test | cut -d' ' -f1"), public1);
    assert.match(
      await run(tlsClient("api.allowed.test", "api.allowed.test")),
      new RegExp(`^fakenet-tls ${public1} \\S+ api\\.allowed\\.test$`),
    );
    assert.equal(await run("getent hosts denied.test || echo none"), "none");
    // By address, with a name not allowed, with none: refused.
    assert.doesNotMatch(await run(tlsClient(public2, "denied.test")), /fakenet/);
    assert.equal(
      await run(
        `timeout 5 bash -c 'exec 3<>/dev/tcp/${public1}/${NET_PORT}; head -1 <&3' 2>/dev/null || echo refused`,
      ),
      "refused",
    );
  });

  it("changes policy live: a name dropped stops resolving and connecting, then comes back", async () => {
    await sandbox.updateNetwork({ allowOut: ["*.other.test"], denyOut: ["0.0.0.0/0"] });
    assert.deepEqual((await sandbox.getInfo()).network?.allowOut, ["*.other.test"]);
    // The guest may have the answer cached for its TTL (5 s here): the connection is refused anyway.
    assert.doesNotMatch(await run(tlsClient(public1, "api.allowed.test")), /fakenet/);
    assert.equal(await run("getent hosts new.allowed.test || echo none"), "none");
    await sandbox.updateNetwork({ allowOut: ["*.allowed.test"], denyOut: ["0.0.0.0/0"] });
    assert.match(await run(tlsClient("api.allowed.test", "api.allowed.test")), /^fakenet-tls /);
  });

  it("is served by the guest services process alone, and again after it is killed", async () => {
    const pid = servicesPid(server.process.pid);
    // The gate's listeners in the sandbox's namespace: that process's, none of the server's.
    assert.deepEqual([...new Set(slotListeners(GATE_TCP_PORT))], [pid], "TCP :15001");
    assert.deepEqual([...new Set(slotListeners(53))], [pid], "DNS over TCP");
    assert.deepEqual([...new Set(slotListeners(53, "udp"))], [pid], "DNS over UDP");
    process.kill(pid, "SIGKILL");
    await waitFor("the guest services process started again", () => {
      try {
        return servicesPid(server.process.pid) !== pid;
      } catch {
        return false;
      }
    });
    // The guest's DNS retries; the gate is back on new listeners with the same policy.
    const back = performance.now();
    assert.equal(await run("getent hosts again.allowed.test | cut -d' ' -f1"), public1);
    assert.match(await run(tlsClient("api.allowed.test", "api.allowed.test")), /^fakenet-tls /);
    assert.equal(await run("getent hosts denied.test || echo none"), "none");
    console.log(
      `# the gate answered again ${Math.round(performance.now() - back)} ms after the restart`,
    );
    assert.deepEqual([...new Set(slotListeners(GATE_TCP_PORT))], [servicesPid(server.process.pid)]);
  });
});
