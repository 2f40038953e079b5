import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { DEFAULT_EGRESS_POLICY, type EgressPolicy } from "../../../src/network/index.js";
import { leakCheck, removeLeftovers } from "../../helpers/leak-check.js";
import { CleanupStack } from "../../helpers/network/cleanup-stack.js";
import { FakeGuest } from "../../helpers/network/fake-guest.js";
import { runEnv } from "../../helpers/run-env.js";
import { FAKEHOST, FakeHost, type RemoteSlot } from "./fake-host.js";

// What a slot pool must never open on the host it runs on, seen on a fake host (FakeHost: a
// namespace standing in for a whole machine with forwarding off, a LAN with a router to a
// fake internet and a cloud metadata stand-in, and a second network), so that neither the
// real host's routes nor its forwarding are touched. Two slots, each with a fake guest.

const PORT = 9191;
const cleanup = new CleanupStack();
let host: FakeHost;
let slotA: RemoteSlot;
let slotB: RemoteSlot;
let guestA: FakeGuest;

before(async () => {
  await removeLeftovers();
  host = await FakeHost.start(PORT);
  cleanup.defer(() => host.close());
  slotA = await host.acquire();
  slotB = await host.acquire();
  guestA = await FakeGuest.attach(slotA);
  cleanup.defer(() => guestA.close());
  const guestB = await FakeGuest.attach(slotB);
  cleanup.defer(() => guestB.close());
  assert.ok((await guestB.agent.listen(PORT, "guestB")).ok);
});

after(async () => {
  await cleanup.run();
  assert.deepEqual(await leakCheck(), []);
});

/** What guest A reaches of `hosts`, on PORT. */
async function reachable(hosts: readonly string[]): Promise<string[]> {
  const reached: string[] = [];
  for (const address of hosts) {
    if ((await guestA.agent.connect(address, PORT, 1000)).ok) reached.push(address);
  }
  return reached;
}

function policy(p: Partial<EgressPolicy>): EgressPolicy {
  return { ...DEFAULT_EGRESS_POLICY, ...p };
}

const { public1, private1, metadata, router, lan1, side1 } = FAKEHOST;

test("a guest reaches the internet through the fake host, as through a real one", async () => {
  await host.setPolicy(slotA, policy({}));
  assert.deepEqual(await guestA.agent.connect(public1, PORT), {
    ok: true,
    data: `fakehost ${public1} ${FAKEHOST.hostAddress}`,
  });
});

/** The widest policies: every one of the refused addresses named, one by one or as a block. */
const WIDEST = [
  policy({ allowOut: ["0.0.0.0/0"] }),
  policy({ allowInternet: false, allowOut: ["0.0.0.0/1", "128.0.0.0/1"] }),
];

test("no policy opens link-local or the cloud metadata address", async () => {
  const named = policy({ allowOut: ["0.0.0.0/0", `${metadata}/32`, "169.254.0.0/16"] });
  for (const p of [policy({}), ...WIDEST, named]) {
    await host.setPolicy(slotA, p);
    assert.deepEqual(await reachable([public1, metadata]), [public1], JSON.stringify(p));
  }
});

test("no policy opens another slot or the host's own addresses", async () => {
  const named = policy({
    allowOut: ["0.0.0.0/0", runEnv().networkCidr, FAKEHOST.hostAddress, FAKEHOST.sideHostAddress],
  });
  const refused = [
    slotB.hostAddress,
    slotB.hostVethAddress,
    slotA.hostVethAddress,
    FAKEHOST.hostAddress,
    FAKEHOST.sideHostAddress,
  ];
  for (const p of [policy({}), ...WIDEST, named]) {
    await host.setPolicy(slotA, p);
    assert.deepEqual(await reachable([public1, ...refused]), [public1], JSON.stringify(p));
  }
});

test("the host's networks (LANs, whatever their addresses) and private ranges open only to an allowOut entry naming them", async () => {
  const lan = [router, lan1, side1];
  for (const p of [policy({}), ...WIDEST]) {
    await host.setPolicy(slotA, p);
    assert.deepEqual(await reachable([public1, ...lan, private1]), [public1], JSON.stringify(p));
  }
  await host.setPolicy(slotA, policy({ allowInternet: false, allowOut: [lan1, private1] }));
  assert.deepEqual(await reachable([public1, router, lan1, side1, private1]), [lan1, private1]);
});

test("the fake host forwards between none of its own networks once a pool runs on it", async () => {
  // LAN → side network, side network → LAN and the internet: not routed.
  for (const [from, to] of [
    [host.world, side1],
    [host.side, router],
    [host.side, lan1],
    [host.side, public1],
  ] as const) {
    const reply = await from.connect(to, PORT, 1000);
    assert.equal(reply.ok, false, `forwarded to ${to}: ${JSON.stringify(reply)}`);
  }
  // Meanwhile the slots' own traffic is.
  await host.setPolicy(slotA, policy({}));
  assert.deepEqual(await reachable([public1]), [public1]);
  // The pool turned forwarding on where its slots need it (their veths, and the LAN for
  // replies, guarded), not for the whole host.
  assert.equal(await host.sysctl("net/ipv4/ip_forward"), "0");
  assert.equal(await host.sysctl(`net/ipv4/conf/${FAKEHOST.sideInterface}/forwarding`), "0");
  assert.equal(await host.sysctl(`net/ipv4/conf/${FAKEHOST.lanInterface}/forwarding`), "1");
  assert.ok(
    (await host.forwardRules()).some(
      (r) => r.includes(`-i ${FAKEHOST.lanInterface} `) && r.includes("warren-forwarding"),
    ),
    "no forwarding guard on the LAN interface",
  );
});
