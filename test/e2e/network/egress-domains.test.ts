// Egress by domain through a real slot (no VM: a fake guest, see FakeGuest) and the fake
// internet (FakeNet), with a DNS server of the test's own standing in for the host's
// resolver: `*.allowed.test` → public1, `denied.test` → public2, `lan.allowed.test` → a
// private address. The gate runs in this process, listening inside the slot's namespace.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import {
  DEFAULT_EGRESS_POLICY,
  type EgressPolicy,
  type NetworkSlot,
} from "../../../src/network/index.js";
import { leakCheck, removeLeftovers } from "../../helpers/leak-check.js";
import { CleanupStack } from "../../helpers/network/cleanup-stack.js";
import { guestBehindGate, selfSignedCertificate } from "../../helpers/network/fake-dns.js";
import type { FakeGuest } from "../../helpers/network/fake-guest.js";
import { FAKENET, FakeNet } from "../../helpers/network/fake-net.js";

const NET_PORT = 9090;
const TLS_PORT = 8443;
/** What the guest's resolv.conf names: redirected to the gate while domains are listed. */
const GUEST_DNS = "8.8.8.8";
const { public1, public2, private1 } = FAKENET;
const NAMES: Record<string, string> = {
  "denied.test": public2,
  "lan.allowed.test": private1,
};
const cleanup = new CleanupStack();
let slot: NetworkSlot;
let guest: FakeGuest;
let gateConnections: () => number;

before(async () => {
  await removeLeftovers();
  const net = await FakeNet.start(NET_PORT);
  cleanup.defer(() => net.close());
  const tls = selfSignedCertificate("fakenet");
  assert.ok((await net.agent.listenTls(TLS_PORT, "fakenet-tls", tls)).ok);
  ({ slot, guest, gateConnections } = await guestBehindGate(
    cleanup,
    (name) => NAMES[name] ?? (name.endsWith(".allowed.test") ? public1 : undefined),
  ));
});

after(async () => {
  await cleanup.run();
  assert.deepEqual(await leakCheck(), []);
});

async function withPolicy(policy: Partial<EgressPolicy>): Promise<void> {
  await slot.setPolicy({ ...DEFAULT_EGRESS_POLICY, ...policy });
}

const ONLY_ALLOWED = { allowOut: ["*.allowed.test"], denyOut: ["0.0.0.0/0"] };

test("DNS answers only allowed names, whatever resolver the guest asks", async () => {
  await withPolicy(ONLY_ALLOWED);
  assert.deepEqual(await guest.agent.resolve(GUEST_DNS, "api.allowed.test"), {
    ok: true,
    data: public1,
  });
  assert.deepEqual(await guest.agent.resolve("1.1.1.1", "x.allowed.test"), {
    ok: true,
    data: public1,
  });
  assert.deepEqual(await guest.agent.resolve(GUEST_DNS, "denied.test"), {
    ok: false,
    error: "ENOTFOUND",
  });
  // An allowed name resolving into a private range: no address to give.
  const lan = await guest.agent.resolve(GUEST_DNS, "lan.allowed.test");
  assert.equal(lan.ok, false);
});

test("TLS by SNI and HTTP by Host reach an allowed name at Warren's address, on any port", async () => {
  await withPolicy(ONLY_ALLOWED);
  // The guest sends it to public2: the gate connects to what api.allowed.test resolves to.
  const tls = await guest.agent.tls(public2, TLS_PORT, "api.allowed.test");
  assert.ok(tls.ok, JSON.stringify(tls));
  assert.match(tls.data ?? "", new RegExp(`^fakenet-tls ${public1} \\S+ api\\.allowed\\.test$`));
  // Plain HTTP is relayed request by request (each Host judged): an HTTP server behind it.
  const httpPort = FakeNet.httpPort(NET_PORT);
  const http = await guest.agent.http(public2, httpPort, `www.allowed.test:${httpPort}`);
  assert.ok(http.ok, JSON.stringify(http));
  assert.match(http.data ?? "", new RegExp(`^fakenet ${public1} `));
});

test("no connection for a name not allowed, for no name, or for a bare IP", async () => {
  await withPolicy(ONLY_ALLOWED);
  assert.equal((await guest.agent.tls(public2, TLS_PORT, "denied.test")).ok, false);
  const httpPort = FakeNet.httpPort(NET_PORT);
  assert.equal((await guest.agent.http(public1, httpPort, "denied.test")).ok, false);
  assert.equal((await guest.agent.tls(public1, TLS_PORT, undefined)).ok, false, "no SNI");
  assert.equal((await guest.agent.connect(public1, NET_PORT, 1000)).ok, false, "a bare IP");
  // Private ranges stay closed to a name that resolves into one.
  assert.equal((await guest.agent.http(public1, httpPort, "lan.allowed.test")).ok, false);
});

test("allow beats deny: an allowOut address is reached directly, the gate untouched", async () => {
  await withPolicy({ ...ONLY_ALLOWED, allowOut: [...ONLY_ALLOWED.allowOut, public2] });
  assert.deepEqual(await guest.agent.connect(public2, NET_PORT), {
    ok: true,
    data: `fakenet ${public2} ${FAKENET.hostAddress}`,
  });
});

test("a live policy change cuts gate connections it no longer allows", async () => {
  await withPolicy(ONLY_ALLOWED);
  const open = await guest.agent.tls(public1, TLS_PORT, "keep.allowed.test", true);
  assert.ok(open.ok && open.conn !== undefined, JSON.stringify(open));
  assert.deepEqual(await guest.agent.send(open.conn as number, "ping"), { ok: true, data: "ping" });
  assert.equal(gateConnections(), 1);
  await withPolicy({ allowOut: ["*.other.test"], denyOut: ["0.0.0.0/0"] });
  assert.equal((await guest.agent.send(open.conn as number, "again", 1000)).ok, false);
  assert.equal(gateConnections(), 0);
  // Domains gone altogether: DNS is the guest's own again (here: nothing answers).
  await withPolicy({ denyOut: ["0.0.0.0/0"] });
  assert.equal((await guest.agent.resolve(GUEST_DNS, "api.allowed.test", 1000)).ok, false);
});
