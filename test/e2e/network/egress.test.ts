import assert from "node:assert/strict";
import { createServer, type Server } from "node:net";
import { after, before, test } from "node:test";
import {
  DEFAULT_EGRESS_POLICY,
  type EgressPolicy,
  EgressPolicyError,
  NetnsSlotPool,
  type NetworkSlot,
} from "../../../src/network/index.js";
import { leakCheck, removeLeftovers } from "../../helpers/leak-check.js";
import { CleanupStack } from "../../helpers/network/cleanup-stack.js";
import { FakeGuest, TAP_OWNER } from "../../helpers/network/fake-guest.js";
import { FAKENET, FakeNet } from "../../helpers/network/fake-net.js";
import { hostConnect, NetnsAgent } from "../../helpers/network/netns-agent.js";
import { runEnv, runPoolOptions } from "../../helpers/run-env.js";

// One slot with a fake guest (a stand-in for QEMU and the VM, see FakeGuest), and a fake
// internet (FakeNet) behind the host: the slot's egress interface is the fake net's veth,
// so nothing here leaves the machine.

const NET_PORT = 9090;
const GUEST_PORT = 8080;
const cleanup = new CleanupStack();
let slot: NetworkSlot;
let guest: FakeGuest;
let hostListener: Server;
let hostPort: number;

before(async () => {
  await removeLeftovers();
  const net = await FakeNet.start(NET_PORT);
  cleanup.defer(() => net.close());
  const pool = new NetnsSlotPool({
    ...runPoolOptions(),
    size: 0,
    tapOwner: TAP_OWNER,
    egressInterface: FAKENET.hostVeth,
  });
  cleanup.defer(() => pool.close());
  slot = await pool.acquire();
  guest = await FakeGuest.attach(slot);
  cleanup.defer(() => guest.close());
  assert.ok((await guest.agent.listen(GUEST_PORT, "guest")).ok);
  hostListener = createServer((socket) => socket.end("host\n"));
  await new Promise<void>((resolve) => hostListener.listen(0, "0.0.0.0", resolve));
  cleanup.defer(() => hostListener.close());
  hostPort = (hostListener.address() as { port: number }).port;
});

after(async () => {
  await cleanup.run();
  assert.deepEqual(await leakCheck(), []);
});

/** What the guest reaches of `hosts` (on the fake net's port, or `port`). */
async function reachable(hosts: readonly string[], port = NET_PORT): Promise<string[]> {
  const reached: string[] = [];
  for (const host of hosts) {
    const reply = await guest.agent.connect(host, port, 1000);
    if (reply.ok) reached.push(host);
  }
  return reached;
}

const { public1, public2, private1 } = FAKENET;
const ALL = [public1, public2, private1];

async function withPolicy(policy: Partial<EgressPolicy>): Promise<void> {
  await slot.setPolicy({ ...DEFAULT_EGRESS_POLICY, ...policy });
}

test("by default the guest reaches the internet, masqueraded, but no private range", async () => {
  await withPolicy({});
  const reply = await guest.agent.connect(public1, NET_PORT);
  assert.deepEqual(reply, { ok: true, data: `fakenet ${public1} ${FAKENET.hostAddress}` });
  assert.deepEqual(await reachable(ALL), [public1, public2]);
});

test("allowInternet false refuses public addresses", async () => {
  await withPolicy({ allowInternet: false });
  assert.deepEqual(await reachable(ALL), []);
});

test("denyOut refuses an address, the rest of the internet stays open", async () => {
  await withPolicy({ denyOut: [public1] });
  assert.deepEqual(await reachable(ALL), [public2]);
});

test("allowOut wins over denyOut", async () => {
  await withPolicy({ denyOut: ["198.51.100.0/24"], allowOut: [public1] });
  assert.deepEqual(await reachable(ALL), [public1]);
});

test("allowOut opens addresses with the internet off", async () => {
  await withPolicy({ allowInternet: false, allowOut: [public2] });
  assert.deepEqual(await reachable(ALL), [public2]);
});

test("allowOut is the only way to a private range", async () => {
  await withPolicy({ allowOut: ["192.168.77.0/24"] });
  assert.deepEqual(await reachable(ALL), ALL);
});

test("no policy opens the host or the slots", async () => {
  await withPolicy({ allowOut: ["0.0.0.0/0", FAKENET.hostAddress, runEnv().networkCidr] });
  // 0.0.0.0/0 opens the internet, not the private ranges (no entry inside one names them).
  assert.deepEqual(await reachable(ALL), [public1, public2]);
  // The host's address on the fake net is a public address, and allowed twice over.
  const hostAddresses = [FAKENET.hostAddress, slot.hostVethAddress, slot.hostAddress];
  assert.deepEqual(await reachable(hostAddresses, hostPort), []);
});

test("the host's LAN is refused, even to allowOut 0.0.0.0/0, unless an entry inside it names it", async () => {
  const { lan1, router } = FAKENET;
  // Public-looking addresses, but on the network of the host's egress interface.
  await withPolicy({});
  assert.deepEqual(await reachable([lan1, router, public1]), [public1]);
  await withPolicy({ allowOut: ["0.0.0.0/0"] });
  assert.deepEqual(await reachable([lan1, router, public1]), [public1]);
  await withPolicy({ allowInternet: false, allowOut: [lan1] });
  assert.deepEqual(await reachable([lan1, router, public1]), [lan1]);
});

test("a policy change takes effect on a running guest, open connections included", async () => {
  await withPolicy({});
  const opened = await guest.agent.open(public1, NET_PORT);
  assert.ok(opened.ok && opened.conn !== undefined, JSON.stringify(opened));
  const conn = opened.conn;
  assert.deepEqual(await guest.agent.send(conn, "one"), { ok: true, data: "one" });

  await withPolicy({ allowInternet: false });
  const cut = await guest.agent.send(conn, "two", 1000);
  assert.equal(
    cut.ok,
    false,
    `the open connection survived the policy change: ${JSON.stringify(cut)}`,
  );
  assert.deepEqual(await reachable([public1]), []);

  await withPolicy({});
  assert.deepEqual(await reachable([public1]), [public1]);
});

test("a refusal reaches the guest at once: a reset, not a silence", async () => {
  await withPolicy({ allowInternet: false });
  const reply = await guest.agent.connect(public1, NET_PORT, 2000);
  assert.deepEqual(reply, { ok: false, error: "ECONNREFUSED" });
});

test("nothing in the slot's namespace itself opens a connection, root included, whatever the policy", async () => {
  // What would run there (a VMM that opens its tap itself, or one taken over by its guest)
  // must not leave by the host's NAT around the policy, which polices forwarded packets.
  await withPolicy({ allowOut: ["0.0.0.0/0", "192.168.77.0/24"] });
  assert.deepEqual(await reachable(ALL), ALL, "the guest reaches them");
  const inSlot = await NetnsAgent.start(slot.netnsPath);
  try {
    const targets = [
      ...[...ALL, FAKENET.lan1].map((host) => ({ host, port: NET_PORT })),
      ...[FAKENET.hostAddress, slot.hostVethAddress].map((host) => ({ host, port: hostPort })),
    ];
    for (const { host, port } of targets) {
      const reply = await inSlot.connect(host, port, 1000);
      assert.equal(reply.ok, false, `the namespace reached ${host}: ${JSON.stringify(reply)}`);
    }
  } finally {
    await inSlot.close();
  }
});

test("the host reaches the guest whatever the policy", async () => {
  await withPolicy({ allowInternet: false, denyOut: ["0.0.0.0/0"] });
  const reply = await hostConnect(slot.hostAddress, GUEST_PORT);
  assert.equal(reply.ok, true, JSON.stringify(reply));
});

test("a bad entry is refused by name and the policy in force stays", async () => {
  await withPolicy({ denyOut: [public2] });
  const before = slot.policy;
  for (const [list, entry] of [
    ["allowOut", "198.51.100.300"],
    ["denyOut", "example.com"],
    ["denyOut", "10.0.0.0/33"],
    ["allowOut", "2001:db8::1"],
    ["allowOut", "010.1.1.1"],
  ] as const) {
    await assert.rejects(withPolicy({ [list]: [public1, entry] }), (err: unknown) => {
      assert.ok(err instanceof EgressPolicyError, String(err));
      assert.equal(err.kind, "invalid_argument");
      assert.equal(err.entry, entry);
      assert.match(err.message, new RegExp(`${list} entry "${entry.replaceAll(".", "\\.")}"`));
      return true;
    });
  }
  assert.equal(slot.policy, before);
  assert.deepEqual(await reachable([public1, public2]), [public1]);
});
