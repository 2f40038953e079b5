import assert from "node:assert/strict";
import { test } from "node:test";
import { forwardingGuard } from "./host-forwarding.js";
import { hostRules } from "./host-rules.js";
import { parseBaseCidr, slotAddresses } from "./slot-addressing.js";

const base = parseBaseCidr("10.201.0.0/16");
const slot = slotAddresses(base, 3);
const lines = (egressInterface: string | undefined, serverUid = 0) =>
  hostRules(slot, { egressInterface, serverUid }).map(
    (r) => `${r.table} ${r.chain} ${r.spec.join(" ")}`,
  );

test("slots get consecutive /31s and comment-tagged host rules", () => {
  assert.deepEqual(
    [slot.netns, slot.hostVeth, slot.hostVethAddress, slot.hostAddress],
    ["warren-3", "wv3", "10.201.0.6", "10.201.0.7"],
  );
  assert.equal(slotAddresses(base, 32767).hostAddress, "10.201.255.255");
  assert.throws(() => slotAddresses(base, 32768), /outside 1\.\.32767/);
  assert.throws(() => slotAddresses(base, 0), /outside/);

  const rules = hostRules(slot, { egressInterface: "eth0", serverUid: 0 });
  assert.ok(rules.every((r) => r.spec.join(" ").includes("-m comment --comment warren:3 -j")));
  assert.deepEqual(
    rules.map((r) => `${r.table} ${r.chain} ${r.spec[r.spec.indexOf("-j") + 1]}`),
    [
      "filter OUTPUT REJECT",
      "filter INPUT ACCEPT",
      "filter INPUT DROP",
      "filter FORWARD DROP",
      "filter FORWARD ACCEPT",
      "filter FORWARD ACCEPT",
      "filter FORWARD DROP",
      "filter FORWARD DROP",
      "nat POSTROUTING MASQUERADE",
    ],
  );
  const noEgress = hostRules(slot, { egressInterface: undefined, serverUid: 0 });
  assert.equal(noEgress.filter((r) => r.spec.includes("ACCEPT")).length, 1);
  assert.ok(!noEgress.some((r) => r.table === "nat"));
});

test("only the server's uid opens connections to a slot from the host", () => {
  const [output] = lines("eth0", 1234);
  assert.equal(
    output,
    "filter OUTPUT -o wv3 -m conntrack ! --ctstate ESTABLISHED,RELATED -m owner ! --uid-owner 1234 " +
      "-m comment --comment warren:3 -j REJECT --reject-with icmp-admin-prohibited",
  );
  assert.equal(lines(undefined, 1234)[0], output, "also without egress");
});

test("the host never forwards a slot's packets to link-local, whatever the namespace allows", () => {
  const forward = lines("eth0").filter((l) => l.startsWith("filter FORWARD"));
  assert.equal(
    forward[0],
    "filter FORWARD -i wv3 -d 169.254.0.0/16 -m comment --comment warren:3 -j DROP",
  );
  assert.match(forward[1] ?? "", /-i wv3 -o eth0 .*-j ACCEPT$/);
});

test("the forwarding guard drops what comes in on the egress interface but slots' replies", () => {
  assert.equal(
    forwardingGuard("eth0").spec.join(" "),
    "-i eth0 -m conntrack ! --ctstate SNAT -m comment --comment warren-forwarding -j DROP",
  );
});
