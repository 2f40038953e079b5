import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseDomainPattern } from "../../shared/domain-patterns.js";
import { validateEgressPolicy } from "../egress-policy.js";
import { egressLimits } from "../netns-rules.js";
import { addressAllowed, decide } from "./decide.js";

const limits = egressLimits("10.201.0.0/16", ["198.51.100.254"], ["198.51.100.128/25"]);
const DNS: Record<string, string[]> = {
  "api.allowed.test": ["198.51.100.1"],
  "inside.allowed.test": ["127.0.0.1", "10.201.0.5", "192.168.77.1"],
  "lan.allowed.test": ["192.168.77.1"],
  "mixed.allowed.test": ["169.254.169.254", "198.51.100.2"],
};
const resolve = async (name: string) => DNS[name] ?? [];
const domains = ["*.allowed.test", "exact.test"].map(
  (e) => parseDomainPattern(e) ?? assert.fail(e),
);
const denyAll = validateEgressPolicy({ allowInternet: true, allowOut: [], denyOut: ["0.0.0.0/0"] });

describe("the egress gate's decision", () => {
  it("an allowed name goes where Warren resolves it, whatever address the guest chose", async () => {
    assert.deepEqual(
      await decide(
        { destination: "203.0.113.9", name: "api.allowed.test" },
        denyAll,
        domains,
        limits,
        resolve,
      ),
      { allow: true, address: "198.51.100.1", by: "domain" },
    );
    // The first address no limit refuses.
    assert.deepEqual(
      await decide(
        { destination: "198.51.100.2", name: "mixed.allowed.test" },
        denyAll,
        domains,
        limits,
        resolve,
      ),
      { allow: true, address: "198.51.100.2", by: "domain" },
    );
  });

  it("never to the host, a slot, loopback or a private range no allowOut names", async () => {
    const inside = await decide(
      { destination: "1.1.1.1", name: "inside.allowed.test" },
      denyAll,
      domains,
      limits,
      resolve,
    );
    assert.equal(inside.allow, false);
    const lan = await decide(
      { destination: "1.1.1.1", name: "lan.allowed.test" },
      denyAll,
      domains,
      limits,
      resolve,
    );
    assert.equal(lan.allow, false);
    const named = validateEgressPolicy({ ...denyAll, allowOut: ["192.168.77.0/24"] });
    assert.deepEqual(
      await decide(
        { destination: "1.1.1.1", name: "lan.allowed.test" },
        named,
        domains,
        limits,
        resolve,
      ),
      { allow: true, address: "192.168.77.1", by: "domain" },
    );
  });

  it("names not listed, no name, or an unresolvable one: judged by address", async () => {
    for (const request of [
      { destination: "198.51.100.1", name: "denied.test" },
      { destination: "198.51.100.1" },
      { destination: "198.51.100.1", name: "allowed.test" },
    ]) {
      const verdict = await decide(request, denyAll, domains, limits, resolve);
      assert.equal(verdict.allow, false, JSON.stringify(request));
    }
    const unresolvable = await decide(
      { destination: "1.1.1.1", name: "gone.allowed.test" },
      denyAll,
      domains,
      limits,
      resolve,
    );
    assert.deepEqual(unresolvable, { allow: false, reason: "gone.allowed.test does not resolve" });
    const open = validateEgressPolicy({ allowInternet: true, allowOut: [], denyOut: [] });
    assert.deepEqual(
      await decide({ destination: "198.51.100.1" }, open, domains, limits, resolve),
      {
        allow: true,
        address: "198.51.100.1",
        by: "address",
      },
    );
  });

  it("judges addresses in the egress chain's order: allow beats deny, never-ranges beat all", () => {
    const policy = validateEgressPolicy({
      allowInternet: false,
      allowOut: ["198.51.100.7", "0.0.0.0/0"],
      denyOut: ["198.51.100.0/24"],
    });
    assert.equal(addressAllowed("198.51.100.7", policy, limits), true);
    assert.equal(addressAllowed("8.8.8.8", policy, limits), true, "0.0.0.0/0 opens the internet");
    assert.equal(
      addressAllowed("192.168.1.1", policy, limits),
      false,
      "not the LAN or private ranges",
    );
    assert.equal(addressAllowed("169.254.169.254", policy, limits), false);
    assert.equal(addressAllowed("198.51.100.254", policy, limits), false, "the host");
    assert.equal(addressAllowed("10.201.3.4", policy, limits), false, "a slot");
  });
});
