import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { WarrenError } from "../shared/index.js";
import type { RunCommand } from "./command-runner.js";
import { findHostRules, hostRules } from "./host-rules.js";
import { NetnsSlotPool } from "./netns-slot-pool.js";
import { parseBaseCidr, slotAddresses } from "./slot-addressing.js";
import {
  DEFAULT_NETWORK_PREFIX,
  DEFAULT_SLOT_NAMES,
  slotIndexIn,
  slotNamesFor,
  validateSlotNames,
} from "./slot-names.js";
import { cleanupStaleSlots } from "./stale-cleanup.js";

const base = parseBaseCidr("10.201.0.0/16");

/** An invalid_argument WarrenError whose message matches `pattern`. */
const invalid = (pattern: RegExp) => (err: unknown) =>
  err instanceof WarrenError && err.kind === "invalid_argument" && pattern.test(err.message);

describe("slot names", () => {
  it("default to Warren's historic names", () => {
    const slot = slotAddresses(base, 7);
    assert.deepEqual(
      [slot.netns, slot.netnsPath, slot.hostVeth, slot.ruleTag],
      ["warren-7", "/run/netns/warren-7", "wv7", "warren"],
    );
    assert.equal(slotNamesFor(DEFAULT_NETWORK_PREFIX), DEFAULT_SLOT_NAMES);
    assert.deepEqual(new NetnsSlotPool().names, DEFAULT_SLOT_NAMES);
  });

  it("derive from a network prefix: <p>-<n>, <p>v<n>, <p>:<n>", () => {
    const names = slotNamesFor("zq3f9a");
    assert.deepEqual(names, {
      netnsPrefix: "zq3f9a-",
      hostVethPrefix: "zq3f9av",
      ruleTag: "zq3f9a",
    });
    const slot = slotAddresses(base, 12, names);
    assert.deepEqual([slot.netns, slot.hostVeth], ["zq3f9a-12", "zq3f9av12"]);
    const rules = hostRules(slot, { egressInterface: "eth0", serverUid: 0 });
    assert.ok(rules.every((r) => r.spec.join(" ").includes("--comment zq3f9a:12 -j")));
    const filter = rules.filter((r) => r.table === "filter");
    assert.ok(filter.every((r) => r.spec.includes("zq3f9av12")));
  });

  it("refuse a network prefix that is not short lowercase letters and digits", () => {
    for (const bad of ["", "w", "Warren", "9w", "w-t", "abcdefghi", "w t"]) {
      assert.throws(() => slotNamesFor(bad), invalid(/network prefix must be 2 to 8/), bad);
    }
  });

  it("of different pools never read as each other's slots", () => {
    assert.equal(slotIndexIn("warren-", "warren-12"), 12);
    assert.equal(slotIndexIn("wv", "wv3"), 3);
    // A test run's names and a default server's are disjoint both ways.
    const run = slotNamesFor("zq3f9a");
    for (const [prefix, name] of [
      ["warren-", "zq3f9a-3"],
      ["wv", "zq3f9av3"],
      [run.netnsPrefix, "warren-3"],
      [run.hostVethPrefix, "wv3"],
      ["wv", "wvx3"],
      ["wv", "wv"],
      ["wv", "wv3a"],
    ] as const) {
      assert.equal(slotIndexIn(prefix, name), undefined, `${prefix} vs ${name}`);
    }
  });

  it("are checked by the pool, naming the option at fault", () => {
    assert.throws(
      () => new NetnsSlotPool({ netnsPrefix: "warren-1" }),
      invalid(/^netnsPrefix .*not end in a digit/),
    );
    assert.throws(() => new NetnsSlotPool({ netnsPrefix: "a/b-" }), invalid(/^netnsPrefix/));
    assert.throws(() => new NetnsSlotPool({ hostVethPrefix: "" }), invalid(/^hostVethPrefix/));
    assert.throws(() => new NetnsSlotPool({ hostVethPrefix: "v1" }), invalid(/^hostVethPrefix/));
    assert.throws(() => new NetnsSlotPool({ hostVethPrefix: "w:v" }), invalid(/^hostVethPrefix/));
    assert.throws(() => new NetnsSlotPool({ ruleTag: "a:b" }), invalid(/^ruleTag/));
    assert.throws(() => new NetnsSlotPool({ ruleTag: 'a"b' }), invalid(/^ruleTag/));
    assert.throws(() => new NetnsSlotPool({ ruleTag: "" }), invalid(/^ruleTag/));
  });

  it("keep host veth names within 15 characters for the whole base block", () => {
    // /16: indexes up to 32767 (5 digits), so a prefix of 10 fits and 11 does not.
    assert.doesNotThrow(() => new NetnsSlotPool({ hostVethPrefix: "abcdefghij" }));
    assert.throws(
      () => new NetnsSlotPool({ hostVethPrefix: "abcdefghijk" }),
      invalid(/^hostVethPrefix "abcdefghijk" is too long: .*"abcdefghijk32767" has 16/),
    );
    // A smaller block has shorter indexes: /24 reaches 127.
    assert.doesNotThrow(
      () => new NetnsSlotPool({ hostVethPrefix: "abcdefghijkl", baseCidr: "10.9.9.0/24" }),
    );
    // Every prefix the server setting allows fits a /16.
    assert.doesNotThrow(() => validateSlotNames(slotNamesFor("abcdefgh"), 32767));
  });
});

describe("host rule discovery", () => {
  // iptables-save output with a default server's rules, a test run's, and look-alikes.
  const saved = [
    "*filter",
    ":INPUT ACCEPT [0:0]",
    '-A INPUT -i wv3 -m comment --comment "warren:3" -j DROP',
    "-A INPUT -i zq3f9av1 -m comment --comment zq3f9a:1 -j DROP",
    "-A INPUT -i x -m comment --comment xwarren:4 -j DROP",
    "-A INPUT -i y -m comment --comment warren:x -j DROP",
    "-A FORWARD -o wv3 -m comment --comment warren:3 -j DROP",
    "COMMIT",
    "*nat",
    "-A POSTROUTING -s 10.202.0.3/32 -o eth0 -m comment --comment zq3f9a:1 -j MASQUERADE",
    "COMMIT",
    "",
  ].join("\n");
  const commands: string[] = [];
  const runner: RunCommand = async (file, args, options) => {
    commands.push([file, ...args, options?.input ?? ""].join(" "));
    return { stdout: file === "iptables-save" ? saved : "", stderr: "" };
  };

  it("finds only the rules carrying this pool's tag", async () => {
    const own = await findHostRules(runner, "zq3f9a");
    assert.deepEqual(
      own.map((r) => [r.table, r.index]),
      [
        ["filter", 1],
        ["nat", 1],
      ],
    );
    const server = await findHostRules(runner, "warren");
    assert.deepEqual(
      server.map((r) => r.line),
      [
        '-A INPUT -i wv3 -m comment --comment "warren:3" -j DROP',
        "-A FORWARD -o wv3 -m comment --comment warren:3 -j DROP",
      ],
    );
  });

  it("stale cleanup deletes only this pool's rules", async () => {
    commands.length = 0;
    // Names no host has: the namespace and link listings find nothing to remove.
    const names = slotNamesFor("zq3f9a");
    const report = await cleanupStaleSlots(runner, { ...names, netnsPrefix: "no-such-netns-" });
    assert.equal(report.hostRules, 2);
    const restore = commands.find((c) => c.startsWith("iptables-restore")) ?? "";
    assert.match(restore, /-D INPUT -i zq3f9av1 .*zq3f9a:1/);
    assert.match(restore, /-D POSTROUTING .*zq3f9a:1/);
    assert.doesNotMatch(restore, /warren/);
  });
});
