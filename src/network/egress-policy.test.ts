import assert from "node:assert/strict";
import { test } from "node:test";
import {
  DEFAULT_EGRESS_POLICY,
  type EgressPolicy,
  sameEgressPolicy,
  validateEgressPolicy,
} from "./egress-policy.js";
import { EgressPolicyError } from "./errors.js";

test("validateEgressPolicy normalizes entries", () => {
  const policy = validateEgressPolicy({
    allowInternet: false,
    allowOut: ["1.2.3.4", "10.9.8.7/8", " 1.2.3.4/32 "],
    denyOut: [],
  });
  assert.deepEqual(policy, {
    allowInternet: false,
    allowOut: ["1.2.3.4/32", "10.0.0.0/8"],
    denyOut: [],
    allowDomains: [],
    headerRules: [],
  });
  assert.ok(Object.isFrozen(policy) && Object.isFrozen(policy.allowOut));
  assert.ok(sameEgressPolicy(policy, validateEgressPolicy(policy)));
});

test("a team's policy without header rules is the default one: its slot needs no rewrite", () => {
  const plain = validateEgressPolicy({ ...DEFAULT_EGRESS_POLICY, secretsOf: "team-a" });
  assert.equal(plain.secretsOf, undefined);
  assert.ok(sameEgressPolicy(plain, DEFAULT_EGRESS_POLICY));
  const ruled = validateEgressPolicy({
    ...DEFAULT_EGRESS_POLICY,
    headerRules: [{ domain: "api.example.com", headers: [["x-key", "${e2b.secrets.KEY}"]] }],
    secretsOf: "team-a",
  });
  assert.equal(ruled.secretsOf, "team-a");
  assert.ok(!sameEgressPolicy(ruled, validateEgressPolicy({ ...ruled, secretsOf: "team-b" })));
});

test("validateEgressPolicy names the bad entry", () => {
  const cases: [unknown, string, RegExp][] = [
    [
      { allowInternet: true, allowOut: ["1.2.3.4", "1.2.3"], denyOut: [] },
      "1.2.3",
      /allowOut entry "1\.2\.3"/,
    ],
    [
      { allowInternet: true, allowOut: [], denyOut: ["example.com"] },
      "example.com",
      /denyOut entry/,
    ],
    [{ allowInternet: true, allowOut: [], denyOut: [7] }, "7", /denyOut entry "7"/],
    [{ allowInternet: "yes", allowOut: [], denyOut: [] }, "yes", /allowInternet/],
    [
      { allowInternet: true, allowOut: "1.2.3.4", denyOut: [] },
      "1.2.3.4",
      /allowOut must be a list/,
    ],
  ];
  for (const [input, entry, message] of cases) {
    assert.throws(
      () => validateEgressPolicy(input as EgressPolicy),
      (err: unknown) =>
        err instanceof EgressPolicyError &&
        err.kind === "invalid_argument" &&
        err.entry === entry &&
        message.test(err.message),
      JSON.stringify(input),
    );
  }
});
