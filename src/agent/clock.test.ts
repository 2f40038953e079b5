import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { clockNeedsSetting } from "./clock.js";

describe("clockNeedsSetting", () => {
  const host = 1_800_000_000_000;
  it("corrects a guest more than 50 ms behind", () =>
    assert.equal(clockNeedsSetting(host, host - 51), true));
  it("leaves a guest 50 ms behind or less", () =>
    assert.equal(clockNeedsSetting(host, host - 50), false));
  it("tolerates a guest ahead by request latency", () =>
    assert.equal(clockNeedsSetting(host, host + 4_000), false));
  it("corrects a guest more than 5 s ahead", () =>
    assert.equal(clockNeedsSetting(host, host + 5_001), true));
});
