import assert from "node:assert/strict";
import { createServer, type Server } from "node:net";
import { networkInterfaces } from "node:os";
import { after, before, test } from "node:test";
import { NetnsSlotPool, type NetworkSlot, runCommand } from "../../../src/network/index.js";
import {
  ENVD_PORT,
  GATEWAY_ADDRESS,
  GATEWAY_MAC,
  GUEST_ADDRESS,
} from "../../../src/protocol/index.js";
import { leakCheck, removeLeftovers } from "../../helpers/leak-check.js";
import { CleanupStack } from "../../helpers/network/cleanup-stack.js";
import { FakeGuest, startPump, TAP_OWNER } from "../../helpers/network/fake-guest.js";
import { hostConnect, hostConnectAs, NetnsAgent } from "../../helpers/network/netns-agent.js";
import { fixtureNetns, runPoolOptions } from "../../helpers/run-env.js";

// Two slots, each with a fake guest (see FakeGuest: a stand-in for QEMU and the VM) that
// listens on GUEST_PORT and greets with its name.

const GUEST_PORT = 8080;
const cleanup = new CleanupStack();
let pool: NetnsSlotPool;
let slot1: NetworkSlot;
let slot2: NetworkSlot;
let guest1: FakeGuest;
let guest2: FakeGuest;

before(async () => {
  const removed = await removeLeftovers();
  if (removed.length > 0)
    console.error(`removed leftovers of an earlier run: ${removed.join(", ")}`);
  pool = new NetnsSlotPool({ ...runPoolOptions(), size: 0, tapOwner: TAP_OWNER });
  cleanup.defer(() => pool.close());
  slot1 = await pool.acquire();
  slot2 = await pool.acquire();
  guest1 = await FakeGuest.attach(slot1);
  cleanup.defer(() => guest1.close());
  guest2 = await FakeGuest.attach(slot2);
  cleanup.defer(() => guest2.close());
  for (const [guest, name] of [
    [guest1, "guest1"],
    [guest2, "guest2"],
  ] as const) {
    const listening = await guest.agent.listen(GUEST_PORT, name);
    assert.ok(listening.ok, JSON.stringify(listening));
  }
});

after(async () => {
  await cleanup.run();
  assert.deepEqual(await leakCheck(), []);
});

test("the host reaches each guest at its slot's hostAddress, DNATed to the guest address", async () => {
  assert.notEqual(slot1.hostAddress, slot2.hostAddress);
  for (const [slot, name] of [
    [slot1, "guest1"],
    [slot2, "guest2"],
  ] as const) {
    const reply = await hostConnect(slot.hostAddress, GUEST_PORT);
    // The guest sees the connection on its fixed address, from the host's end of the veth.
    assert.deepEqual(reply, { ok: true, data: `${name} ${GUEST_ADDRESS} ${slot.hostVethAddress}` });
  }
});

test("no local user but the server's reaches a guest: nobody goes around the proxy", async () => {
  assert.ok((await guest1.agent.listen(ENVD_PORT, "envd")).ok);
  // The server runs as root here; 65534 is nobody, 4242 a uid no account has.
  for (const port of [ENVD_PORT, GUEST_PORT]) {
    const asServer = await hostConnect(slot1.hostAddress, port);
    assert.equal(asServer.ok, true, `the server's uid: ${JSON.stringify(asServer)}`);
    for (const uid of [65534, 4242]) {
      const reply = await hostConnectAs(uid, slot1.hostAddress, port, 1000);
      assert.equal(reply.ok, false, `uid ${uid} reached port ${port}: ${JSON.stringify(reply)}`);
    }
  }
  // Refused at once, not left to time out.
  assert.deepEqual(await hostConnectAs(65534, slot2.hostAddress, GUEST_PORT, 1000), {
    ok: false,
    error: "EHOSTUNREACH",
  });
});

test("every slot gives its guest the same addresses and MACs", async () => {
  for (const slot of [slot1, slot2]) {
    const { stdout } = await runCommand("ip", ["-n", slot.netns, "-d", "link", "show", "tap0"]);
    assert.match(stdout, new RegExp(`link/ether ${GATEWAY_MAC} `));
    assert.match(stdout, /tun type tap .*user nobody group nogroup/);
    const neigh = await runCommand("ip", ["-n", slot.netns, "neigh", "show", GUEST_ADDRESS]);
    assert.match(neigh.stdout, /lladdr 02:fc:00:00:00:15 PERMANENT/);
  }
  for (const guest of [guest1, guest2]) {
    const { stdout } = await runCommand("ip", [
      "-n",
      guest.netns,
      "neigh",
      "show",
      GATEWAY_ADDRESS,
    ]);
    assert.match(stdout, new RegExp(`lladdr ${GATEWAY_MAC}`));
  }
});

test("a guest cannot reach another slot, nor its own slot's addresses", async () => {
  for (const host of [slot2.hostAddress, slot2.hostVethAddress, slot1.hostAddress]) {
    const reply = await guest1.agent.connect(host, GUEST_PORT, 1000);
    assert.equal(reply.ok, false, `guest1 reached ${host}: ${JSON.stringify(reply)}`);
  }
  const reply = await guest2.agent.connect(slot1.hostAddress, GUEST_PORT, 1000);
  assert.equal(reply.ok, false, `guest2 reached slot 1: ${JSON.stringify(reply)}`);
});

test("a guest cannot reach the slot namespace itself", async () => {
  // A listener inside slot 1's namespace (nothing Warren runs there, but nothing may be
  // reachable if something did).
  const inSlot = await NetnsAgent.start(slot1.netnsPath);
  try {
    assert.ok((await inSlot.listen(GUEST_PORT + 1, "slot-netns")).ok);
    for (const host of [GATEWAY_ADDRESS, slot1.hostAddress]) {
      const reply = await guest1.agent.connect(host, GUEST_PORT + 1, 1000);
      assert.equal(
        reply.ok,
        false,
        `guest reached the namespace at ${host}: ${JSON.stringify(reply)}`,
      );
    }
  } finally {
    await inSlot.close();
  }
});

test("a guest cannot reach the host's own addresses", async () => {
  const server = await listenOnHost();
  try {
    const port = (server.address() as { port: number }).port;
    const hostAddresses = Object.values(networkInterfaces())
      .flatMap((list) => list ?? [])
      .filter((a) => a.family === "IPv4" && !a.address.startsWith("127."))
      .map((a) => a.address);
    assert.ok(hostAddresses.includes(slot1.hostVethAddress));
    for (const host of hostAddresses) {
      // The listener is there: the host itself reaches it.
      assert.equal((await hostConnect(host, port)).ok, true, host);
      const reply = await guest1.agent.connect(host, port, 1000);
      assert.equal(reply.ok, false, `guest reached the host at ${host}: ${JSON.stringify(reply)}`);
    }
  } finally {
    server.close();
  }
});

test("a guest cannot reach the host's loopback by routing 127.0.0.1 out of its NIC", async () => {
  const server = await listenOnHost("127.0.0.1");
  try {
    const port = (server.address() as { port: number }).port;
    // Inside the guest (root there can do this): let eth0 carry 127/8, and route 127.0.0.1
    // to the gateway ahead of the local table, so packets to 127.0.0.1 really leave on eth0.
    const guestIp = (input: string) =>
      runCommand("ip", ["-n", guest1.netns, "-batch", "-"], { input });
    await runCommand("ip", [
      "netns",
      "exec",
      guest1.netns,
      "sysctl",
      "-q",
      "-w",
      "net.ipv4.conf.eth0.route_localnet=1",
    ]);
    await guestIp(
      "rule add pref 100 lookup local\nrule del pref 0\nrule add to 127.0.0.1 lookup 100 pref 10\n" +
        `route add 127.0.0.1 via ${GATEWAY_ADDRESS} dev eth0 table 100\n`,
    );
    try {
      const before = await natPreroutingPackets(slot1);
      const reply = await guest1.agent.connect("127.0.0.1", port, 1000);
      assert.equal(reply.ok, false, `guest reached the host's loopback: ${JSON.stringify(reply)}`);
      assert.ok(
        (await natPreroutingPackets(slot1)) > before,
        "the trick packet never reached the slot",
      );
    } finally {
      await guestIp("rule add pref 0 lookup local\nrule del pref 100\nrule del pref 10\n");
    }
  } finally {
    server.close();
  }
});

test("only the tap's owner can attach to it", async () => {
  const slot3 = await pool.acquire();
  const netns = fixtureNetns("fakeguest-owner");
  await runCommand("ip", ["netns", "add", netns]);
  try {
    await assert.rejects(
      startPump(slot3, `/run/netns/${netns}`, { uid: 4242, gid: 4242 }),
      /Operation not permitted/,
    );
  } finally {
    await runCommand("ip", ["netns", "del", netns]);
    await pool.release(slot3);
  }
});

function listenOnHost(host = "0.0.0.0"): Promise<Server> {
  const server = createServer((socket) => socket.end("host\n"));
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, host, () => resolve(server));
  });
}

/** Packets that opened new connections in the slot (nat PREROUTING sees only those). */
async function natPreroutingPackets(slot: NetworkSlot): Promise<number> {
  const { stdout } = await runCommand("nsenter", [
    `--net=${slot.netnsPath}`,
    "iptables",
    "-t",
    "nat",
    "-L",
    "PREROUTING",
    "-v",
    "-x",
    "-n",
  ]);
  const match = /policy ACCEPT (\d+) packets/.exec(stdout);
  return Number(match?.[1] ?? 0);
}
