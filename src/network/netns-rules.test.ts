import assert from "node:assert/strict";
import { test } from "node:test";
import { type EgressPolicy, validateEgressPolicy } from "./egress-policy.js";
import { cidrContains, parseCidr, parseIpv4 } from "./ipv4.js";
import {
  type EgressLimits,
  egressChainRules,
  egressLimits,
  egressUpdate,
  gateChainRules,
} from "./netns-rules.js";

// The host of these tests: slots in 10.201.0.0/16, one address on a public-looking LAN
// (198.51.100.0/24) and one on a private one (192.168.1.0/24).
const limits = egressLimits(
  "10.201.0.0/16",
  ["198.51.100.10", "192.168.1.5"],
  ["198.51.100.0/24", "192.168.1.0/24", "10.201.0.6/31"],
);

function policy(p: Partial<EgressPolicy>): EgressPolicy {
  return validateEgressPolicy({ allowInternet: true, allowOut: [], denyOut: [], ...p });
}

/** What the chain does with a packet to `address`: the target of the first rule that matches. */
function verdict(rules: readonly string[], address: string): string {
  const value = parseIpv4(address) as number;
  for (const rule of rules) {
    const match = /^-A \S+ (?:-d (\S+) )?-j (\S+)$/.exec(rule);
    assert.ok(match, rule);
    const [, cidr, target] = match;
    if (cidr === undefined || cidrContains(parseCidr(cidr) ?? assert.fail(cidr), value)) {
      return target as string;
    }
  }
  return "end of chain";
}

const ACCEPT = "ACCEPT";
const REFUSE = "WARREN-REJECT";

test("the egress chain: never, allowOut naming a restricted range, restricted ranges, allowOut, denyOut, internet", () => {
  const rules = egressChainRules(
    policy({
      allowInternet: false,
      allowOut: ["192.168.1.0/24", "0.0.0.0/0"],
      denyOut: ["203.0.113.9"],
    }),
    { never: ["10.201.0.0/16", "127.0.0.0/8"], restricted: ["10.0.0.0/8", "192.168.0.0/16"] },
  );
  assert.deepEqual(rules, [
    "-A WARREN-EGRESS -d 10.201.0.0/16 -j WARREN-REJECT",
    "-A WARREN-EGRESS -d 127.0.0.0/8 -j WARREN-REJECT",
    "-A WARREN-EGRESS -d 192.168.1.0/24 -j ACCEPT",
    "-A WARREN-EGRESS -d 10.0.0.0/8 -j WARREN-REJECT",
    "-A WARREN-EGRESS -d 192.168.0.0/16 -j WARREN-REJECT",
    "-A WARREN-EGRESS -d 0.0.0.0/0 -j ACCEPT",
    "-A WARREN-EGRESS -d 203.0.113.9/32 -j WARREN-REJECT",
    "-A WARREN-EGRESS -j WARREN-REJECT",
  ]);
  // An update re-declares (so empties) the chain and refills it in one transaction.
  assert.match(
    egressUpdate(policy({}), limits),
    /^\*nat\n:WARREN-GATE - \[0:0\]\nCOMMIT\n\*filter\n:WARREN-EGRESS - \[0:0\]\n(-A .*\n)+COMMIT\n$/,
  );
});

test("the limits: slots, host addresses and NEVER_RANGES; private ranges and the host's LANs", () => {
  assert.deepEqual(limits, {
    never: [
      "10.201.0.0/16",
      "198.51.100.10/32",
      "192.168.1.5/32",
      "0.0.0.0/8",
      "127.0.0.0/8",
      "169.254.0.0/16",
      "224.0.0.0/4",
      "240.0.0.0/4",
    ],
    // The private LAN and the slots' own /31 are in ranges listed already.
    restricted: [
      "10.0.0.0/8",
      "172.16.0.0/12",
      "192.168.0.0/16",
      "100.64.0.0/10",
      "198.51.100.0/24",
    ],
  } satisfies EgressLimits);
});

test("no policy opens link-local, cloud metadata, the slots or the host", () => {
  const widest = [
    policy({ allowOut: ["0.0.0.0/0"] }),
    policy({ allowOut: ["169.254.169.254", "169.254.0.0/16", "10.201.0.7", "198.51.100.10"] }),
    policy({ allowInternet: true, allowOut: ["0.0.0.0/1", "128.0.0.0/1"] }),
  ];
  for (const p of widest) {
    const rules = egressChainRules(p, limits);
    for (const address of [
      "169.254.169.254",
      "169.254.0.1",
      "10.201.0.7",
      "198.51.100.10",
      "127.0.0.1",
    ]) {
      assert.equal(verdict(rules, address), REFUSE, `${address} with ${JSON.stringify(p)}`);
    }
  }
});

test("a private range or a LAN of the host opens only to an allowOut entry inside it", () => {
  const byDefault = egressChainRules(policy({}), limits);
  const wide = egressChainRules(policy({ allowOut: ["0.0.0.0/0", "192.0.0.0/2"] }), limits);
  for (const rules of [byDefault, wide]) {
    for (const address of [
      "198.51.100.20",
      "192.168.1.1",
      "10.1.2.3",
      "172.16.0.1",
      "100.64.0.1",
    ]) {
      assert.equal(verdict(rules, address), REFUSE, address);
    }
    assert.equal(verdict(rules, "8.8.8.8"), ACCEPT);
  }
  const named = egressChainRules(
    policy({
      allowInternet: false,
      allowOut: ["198.51.100.20", "10.0.0.0/8"],
      denyOut: ["10.1.0.0/16"],
    }),
    limits,
  );
  assert.equal(verdict(named, "198.51.100.20"), ACCEPT);
  assert.equal(verdict(named, "198.51.100.21"), REFUSE);
  assert.equal(verdict(named, "10.1.2.3"), ACCEPT, "allow wins over deny");
  assert.equal(verdict(named, "8.8.8.8"), REFUSE);
});

test("allowOut wins over denyOut, and denyOut over the internet", () => {
  const rules = egressChainRules(
    policy({ allowOut: ["203.0.113.7"], denyOut: ["203.0.113.0/24"] }),
    limits,
  );
  assert.equal(verdict(rules, "203.0.113.7"), ACCEPT);
  assert.equal(verdict(rules, "203.0.113.8"), REFUSE);
  assert.equal(verdict(rules, "8.8.8.8"), ACCEPT);
});

test("the gate chain: empty without domains; with them, DNS and what the egress chain refuses go to the gate", () => {
  const plain = policy({ allowInternet: false, allowOut: ["198.51.100.7"] });
  assert.deepEqual(gateChainRules(plain, limits), []);
  const withDomains = policy({
    allowInternet: true,
    allowOut: ["198.51.100.7", "*.allowed.test"],
    denyOut: ["0.0.0.0/0"],
  });
  assert.deepEqual(withDomains.allowDomains, ["*.allowed.test"]);
  assert.deepEqual(withDomains.allowOut, ["198.51.100.7/32"]);
  const rules = gateChainRules(withDomains, limits);
  const toGate = "-p tcp -m conntrack --ctstate NEW -j REDIRECT --to-ports 15001";
  assert.deepEqual(rules.slice(0, 3), [
    // What serves the guest on the gateway (its volumes' NFS) is never redirected.
    "-A WARREN-GATE -d 169.254.0.22/32 -j RETURN",
    "-A WARREN-GATE -p udp --dport 53 -j REDIRECT --to-ports 53",
    "-A WARREN-GATE -p tcp --dport 53 -j REDIRECT --to-ports 53",
  ]);
  // The egress chain's order, ACCEPT → RETURN (its own way), REJECT → the gate (TCP).
  assert.ok(rules.includes(`-A WARREN-GATE -d 198.51.100.7/32 -j RETURN`));
  assert.ok(rules.includes(`-A WARREN-GATE -d 0.0.0.0/0 ${toGate}`));
  assert.ok(rules.includes(`-A WARREN-GATE -d 169.254.0.0/16 ${toGate}`));
  assert.equal(rules.at(-1), "-A WARREN-GATE -j RETURN");
  assert.ok(
    rules.indexOf("-A WARREN-GATE -d 198.51.100.7/32 -j RETURN") <
      rules.indexOf(`-A WARREN-GATE -d 0.0.0.0/0 ${toGate}`),
    "allow beats deny",
  );
  const update = egressUpdate(withDomains, limits);
  assert.match(update, /^\*nat\n:WARREN-GATE - \[0:0\]\n-A WARREN-GATE -d 169\.254\.0\.22/);
});

test("the gate chain with header rules: every new TCP connection goes to the gate, DNS only with domains", () => {
  const ruled = policy({
    allowOut: ["198.51.100.7"],
    headerRules: [{ domain: "api.example.com", headers: [["authorization", "Bearer x"]] }],
  });
  assert.deepEqual(gateChainRules(ruled, limits), [
    "-A WARREN-GATE -d 169.254.0.22/32 -j RETURN",
    "-A WARREN-GATE -p tcp -m conntrack --ctstate NEW -j REDIRECT --to-ports 15001",
  ]);
  const both = gateChainRules({ ...ruled, allowDomains: ["*.allowed.test"] }, limits);
  assert.equal(both.length, 4);
  assert.match(both[1] as string, /-p udp --dport 53/);
});

test("policies: domains go among allowOut and split out; denyOut takes none", () => {
  assert.throws(
    () => policy({ denyOut: ["denied.test"] }),
    /denyOut entry "denied.test" is not an IPv4 address or CIDR \(e\.g\./,
  );
  assert.throws(() => policy({ allowOut: ["not a name"] }), /nor a domain/);
  const mixed = policy({ allowOut: ["Example.COM", "*.a.test", "example.com", "10.0.0.1"] });
  assert.deepEqual(mixed.allowDomains, ["example.com", "*.a.test"]);
  assert.deepEqual(mixed.allowOut, ["10.0.0.1/32"]);
});
