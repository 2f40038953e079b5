import assert from "node:assert/strict";
import { test } from "node:test";
import { validateEgressPolicy } from "./egress-policy.js";
import { hostRules } from "./host-rules.js";
import { egressChainRules, egressUpdate } from "./netns-rules.js";
import { parseBaseCidr, slotAddresses } from "./slot-addressing.js";

test("the egress chain: always-blocked, allowOut, denyOut, private ranges, internet", () => {
  const policy = validateEgressPolicy({
    allowInternet: false,
    allowOut: ["192.168.1.0/24"],
    denyOut: ["203.0.113.9"],
  });
  const rules = egressChainRules(policy, ["10.201.0.0/16", "127.0.0.0/8"]);
  assert.deepEqual(rules, [
    "-A WARREN-EGRESS -d 10.201.0.0/16 -j WARREN-REJECT",
    "-A WARREN-EGRESS -d 127.0.0.0/8 -j WARREN-REJECT",
    "-A WARREN-EGRESS -d 192.168.1.0/24 -j ACCEPT",
    "-A WARREN-EGRESS -d 203.0.113.9/32 -j WARREN-REJECT",
    "-A WARREN-EGRESS -d 10.0.0.0/8 -j WARREN-REJECT",
    "-A WARREN-EGRESS -d 172.16.0.0/12 -j WARREN-REJECT",
    "-A WARREN-EGRESS -d 192.168.0.0/16 -j WARREN-REJECT",
    "-A WARREN-EGRESS -d 169.254.0.0/16 -j WARREN-REJECT",
    "-A WARREN-EGRESS -d 100.64.0.0/10 -j WARREN-REJECT",
    "-A WARREN-EGRESS -j WARREN-REJECT",
  ]);
  // An update re-declares (so empties) the chain and refills it in one transaction.
  assert.match(
    egressUpdate(policy, []),
    /^\*filter\n:WARREN-EGRESS - \[0:0\]\n(-A .*\n)+COMMIT\n$/,
  );
});

test("slots get consecutive /31s and comment-tagged host rules", () => {
  const base = parseBaseCidr("10.201.0.0/16");
  const slot = slotAddresses(base, 3);
  assert.deepEqual(
    [slot.netns, slot.hostVeth, slot.hostVethAddress, slot.hostAddress],
    ["warren-3", "wv3", "10.201.0.6", "10.201.0.7"],
  );
  assert.equal(slotAddresses(base, 32767).hostAddress, "10.201.255.255");
  assert.throws(() => slotAddresses(base, 32768), /outside 1\.\.32767/);
  assert.throws(() => slotAddresses(base, 0), /outside/);

  const rules = hostRules(slot, "eth0");
  assert.ok(rules.every((r) => r.spec.join(" ").includes("-m comment --comment warren:3 -j")));
  assert.deepEqual(
    rules.map((r) => `${r.table} ${r.chain} ${r.spec.at(-1)}`),
    [
      "filter INPUT ACCEPT",
      "filter INPUT DROP",
      "filter FORWARD ACCEPT",
      "filter FORWARD ACCEPT",
      "filter FORWARD DROP",
      "filter FORWARD DROP",
      "nat POSTROUTING MASQUERADE",
    ],
  );
  assert.equal(hostRules(slot, undefined).filter((r) => r.spec.includes("ACCEPT")).length, 1);
});
