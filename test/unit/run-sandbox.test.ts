import assert from "node:assert/strict";
import { it } from "node:test";
import { pickRunCidr, summary } from "../helpers/run-sandbox.js";

// The e2e run's IPv4 block (test/helpers/run-sandbox.ts) must overlap no route of the host,
// nor Warren's default block, nor another run's.

const first = () => 0;

it("takes the first free /16 from the random start", () => {
  assert.equal(pickRunCidr([], first), "10.202.0.0/16");
  assert.equal(
    pickRunCidr([], () => 5),
    "10.207.0.0/16",
  );
});

it("skips blocks that overlap a route, either way round", () => {
  const taken = [
    "10.202.7.0/24", // inside a candidate
    "10.203.0.5", // a host route (/32)
    "10.204.0.0/15", // covering two candidates
    "10.206.0.0/16",
  ];
  assert.equal(pickRunCidr(taken, first), "10.207.0.0/16");
});

it("falls back to 172.16/12 when 10/8 is routed, and gives up when all is taken", () => {
  assert.equal(pickRunCidr(["10.0.0.0/8"], first), "172.16.0.0/16");
  assert.equal(pickRunCidr(["10.0.0.0/8", "172.16.0.0/12"], first), undefined);
});

it("wraps around from a late start", () => {
  const candidates = 53 + 16;
  assert.equal(
    pickRunCidr(["172.31.0.0/16"], () => candidates - 1),
    "10.202.0.0/16",
  );
});

it("ignores what is not an IPv4 route", () => {
  assert.equal(pickRunCidr(["fe80::/64", "nonsense", ""], first), "10.202.0.0/16");
});

it("counts what a run left by kind", () => {
  assert.equal(summary([]), "");
  assert.equal(
    summary(["process 12", "netns wtab12-1", "netns wtab12-2", "iptables -t nat -A …"]),
    " and what it left: 1 processes, 2 namespaces, 1 host rules",
  );
});
