import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { INIT_SEED_BYTES } from "../protocol/index.js";
import { initAttempt } from "./envd-guest-agent.js";

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
