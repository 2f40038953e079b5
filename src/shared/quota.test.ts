import assert from "node:assert/strict";
import { it } from "node:test";
import { WarrenError } from "./errors.js";
import { DEFAULT_OWNER, Quota } from "./quota.js";

it("reserves within each owner's limit and refuses past it with 429 quota_exceeded", () => {
  const quota = new Quota("upload bytes", (owner) => (owner === "big" ? 100 : 10), "SETTING");
  const release = quota.reserve(8);
  assert.equal(quota.used(DEFAULT_OWNER), 8);
  quota.reserve(90, "big");
  const err = (() => {
    try {
      quota.reserve(3);
    } catch (e) {
      return e;
    }
  })();
  assert.ok(err instanceof WarrenError);
  assert.equal(err.reason, "quota_exceeded");
  assert.equal(err.status, 429);
  assert.equal(err.message, "upload bytes quota exceeded: 8 of 10 in use, 3 more asked (SETTING)");
  release();
  release();
  assert.equal(quota.used(), 0, "given back once");
  quota.reserve(10);
  assert.equal(quota.used("big"), 90, "owners count apart");
});
