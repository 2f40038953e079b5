// Header rules (E2B's network.rules) through a real slot, its egress gate and the fake
// internet (no VM: a fake guest). The gate terminates the guest's TLS for ruled names with a
// real EgressCa (the guest trusts it alone), sets the headers with secrets filled in, and
// re-encrypts to the fake internet's HTTPS server, whose certificate comes from a CA of the
// test's own, trusted as WARREN_EGRESS_TRUSTED_CA would be. Names resolve through the test's
// DNS server: `*.ruled.test` → public1, `decoy.test` → public2.
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import {
  DEFAULT_EGRESS_POLICY,
  type EgressPolicy,
  type HeaderRule,
  type NetworkSlot,
} from "../../../src/network/index.js";
import { EgressCa } from "../../../src/tls/index.js";
import { leakCheck, removeLeftovers } from "../../helpers/leak-check.js";
import { CleanupStack } from "../../helpers/network/cleanup-stack.js";
import { guestBehindGate } from "../../helpers/network/fake-dns.js";
import type { FakeGuest } from "../../helpers/network/fake-guest.js";
import { FAKENET, FakeNet } from "../../helpers/network/fake-net.js";
import { createTestCa } from "../../helpers/test-ca.js";

const NET_PORT = 9090;
const HTTPS_PORT = 8443;
const { public1, public2 } = FAKENET;
const SECRET = "sk-live-0123456789abcdef";
const cleanup = new CleanupStack();
let slot: NetworkSlot;
let guest: FakeGuest;
let gateConnections: () => number;
let net: FakeNet;
let egressCa: EgressCa;
const upstreamCa = createTestCa("test upstream CA");

before(async () => {
  await removeLeftovers();
  net = await FakeNet.start(NET_PORT);
  cleanup.defer(() => net.close());
  const served = upstreamCa.issue("api.ruled.test", "other.ruled.test", "decoy.test");
  assert.ok((await net.agent.listenHttps(HTTPS_PORT, served)).ok);
  const dir = await mkdtemp(join(tmpdir(), "warren-egress-ca-"));
  cleanup.defer(() => rm(dir, { recursive: true, force: true }));
  egressCa = await EgressCa.open(dir);
  const secrets = new Map([["team-1/api-key", SECRET]]);
  ({ slot, guest, gateConnections } = await guestBehindGate(
    cleanup,
    (name) =>
      name.endsWith(".ruled.test") ? public1 : name === "decoy.test" ? public2 : undefined,
    {
      contextFor: (name) => egressCa.contextFor(name),
      upstreamCa: [upstreamCa.cert],
      secretValue: async (team, name) => secrets.get(`${team}/${name}`),
    },
  ));
});

after(async () => {
  await cleanup.run();
  assert.deepEqual(await leakCheck(), []);
});

const RULE: HeaderRule = {
  domain: "api.ruled.test",
  headers: [["Authorization", "Bearer ${e2b.secrets.api-key}"]],
};

async function withPolicy(policy: Partial<EgressPolicy>): Promise<void> {
  await slot.setPolicy({ ...DEFAULT_EGRESS_POLICY, secretsOf: "team-1", ...policy });
}

/** An HTTPS GET from the guest to `address`, naming `name`, trusting the node's egress CA. */
const get = (address: string, name: string, ca = egressCa.certificate) =>
  guest.agent.https(address, HTTPS_PORT, { servername: name, ca });

test("a ruled name's requests carry the secret; the guest's answer holds none of it", async () => {
  await withPolicy({ allowOut: ["*.ruled.test"], denyOut: ["0.0.0.0/0"], headerRules: [RULE] });
  await net.agent.seen();
  assert.deepEqual(await get(public1, "api.ruled.test"), { ok: true, data: "200 ok" });
  const [seen] = await net.agent.seen();
  assert.equal(seen?.headers.authorization, `Bearer ${SECRET}`);
  assert.equal(seen?.headers.host, "api.ruled.test");
  // Another name under the allowed domain, no rule: its TLS is the upstream's own, untouched.
  assert.deepEqual(await get(public1, "other.ruled.test", upstreamCa.cert), {
    ok: true,
    data: "200 ok",
  });
  const [other] = await net.agent.seen();
  assert.equal(other?.headers.authorization, undefined);
});

test("the secret goes only where Warren resolves the name, whatever address the guest dials", async () => {
  await withPolicy({ headerRules: [RULE] }); // open internet: any address allowed
  await net.agent.seen();
  assert.deepEqual(await get(public2, "api.ruled.test"), { ok: true, data: "200 ok" });
  const [seen] = await net.agent.seen();
  assert.equal(seen?.local, public1, "sent to the name's address, not the guest's pick");
  assert.equal(seen?.headers.authorization, `Bearer ${SECRET}`);
  // A connection naming no ruled host is judged by address and relayed untouched.
  assert.deepEqual(await get(public2, "decoy.test", upstreamCa.cert), { ok: true, data: "200 ok" });
  const [decoy] = await net.agent.seen();
  assert.equal(decoy?.local, public2);
});

test("rules open nothing: a ruled name the policy refuses gets no connection", async () => {
  await withPolicy({ allowInternet: false, headerRules: [RULE] });
  const refused = await get(public1, "api.ruled.test");
  assert.equal(refused.ok, false);
  assert.deepEqual(await net.agent.seen(), []);
});

test("an unknown secret fails the request clearly, and nothing reaches the server", async () => {
  await withPolicy({
    headerRules: [{ domain: "api.ruled.test", headers: [["x-key", "${e2b.secrets.missing}"]] }],
  });
  const res = await get(public1, "api.ruled.test");
  assert.equal(res.ok, true);
  assert.match(
    (res as { data: string }).data,
    /^502 warren egress: the network rule for api\.ruled\.test names secret "missing"/,
  );
  assert.deepEqual(await net.agent.seen(), []);
  // Another team's sandbox does not see team-1's secrets.
  await withPolicy({ secretsOf: "team-2", headerRules: [RULE] });
  assert.match(JSON.stringify(await get(public1, "api.ruled.test")), /"data":"502 .*\\"api-key\\"/);
});

test("a policy change applies at once: rules dropped, the next connection is the guest's own", async () => {
  await withPolicy({ headerRules: [RULE] });
  assert.equal((await get(public1, "api.ruled.test")).ok, true);
  await withPolicy({});
  assert.equal(gateConnections(), 0);
  assert.equal((await get(public1, "api.ruled.test")).ok, false, "not the egress CA's now");
  assert.deepEqual(await get(public1, "api.ruled.test", upstreamCa.cert), {
    ok: true,
    data: "200 ok",
  });
  const seen = await net.agent.seen();
  assert.equal(seen.at(-1)?.headers.authorization, undefined);
});
