import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { INIT_SEED_BYTES } from "../../protocol/index.js";
import { PhaseTimes, phase, recordPhases } from "../../shared/phases.js";
import { initAttempt, recordInitSteps } from "./envd-guest-agent.js";

describe("initAttempt (/init bodies)", () => {
  it("gives every attempt a fresh 32-byte seed in standard base64", () => {
    const seeds = Array.from({ length: 64 }, () => initAttempt({}, true).seed ?? "");
    assert.equal(new Set(seeds).size, seeds.length, "no seed twice");
    for (const seed of seeds) {
      assert.match(seed, /^[A-Za-z0-9+/]{43}=$/);
      assert.equal(Buffer.from(seed, "base64").length, INIT_SEED_BYTES);
    }
  });

  it("keeps the body, and stamps the host's time only when asked", () => {
    const body = { envVars: { A: "1" }, accessToken: "t" };
    const stamped = initAttempt(body, true);
    const { seed: _seed, timestamp, ...rest } = stamped;
    assert.deepEqual(rest, body);
    assert.ok(Math.abs(Date.parse(timestamp ?? "") - Date.now()) < 5_000);
    assert.equal("timestamp" in initAttempt(body, false), false);
    assert.equal(body.envVars.A, "1");
    assert.equal("seed" in body, false, "the caller's body is not changed");
  });
});

describe("recordInitSteps (/init's own split, from a guest)", () => {
  const split = async (header: string | string[] | undefined) => {
    const times = new PhaseTimes();
    await recordPhases(times, () =>
      phase("guest.init", async () => {
        await new Promise((resolve) => setTimeout(resolve, 200));
        recordInitSteps(header);
      }),
    );
    return times.toJSON();
  };

  it("records each step as guest.init.<step>, out of guest.init's own time", async () => {
    const times = await split("parse=0.5,seed=0.1,clock=0,trust=150.5,mounts=3");
    assert.equal(times["guest.init.trust"], 150.5);
    assert.equal(times["guest.init.mounts"], 3);
    assert.equal(times["guest.init.parse"], 0.5);
    assert.ok(
      (times["guest.init"] ?? 0) < 200 - 100,
      `guest.init keeps only the rest: ${times["guest.init"]}`,
    );
  });

  it("drops what envd does not have: other names, repeats, negative, huge or not numbers, long headers", async () => {
    const times = await split(
      "evil=5,trust=1,trust=900,seed=-1,clock=1e9,mounts=NaN,parse=,__proto__=1",
    );
    assert.deepEqual(Object.keys(times).sort(), ["guest.init", "guest.init.trust"]);
    assert.equal(times["guest.init.trust"], 1);
    assert.deepEqual(Object.keys(await split(`trust=1,${"x".repeat(300)}`)), ["guest.init"]);
    assert.deepEqual(Object.keys(await split(["trust=1", "trust=2"])), ["guest.init"]);
  });
});
