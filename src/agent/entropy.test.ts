import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import { INIT_SEED_BYTES } from "../protocol/index.js";
import { WarrenError } from "../shared/index.js";
import { parseSeed } from "./entropy.js";

/** parseSeed throws invalid_argument, and its message does not quote what it was given. */
function refused(value: unknown, message: RegExp): void {
  assert.throws(
    () => parseSeed(value),
    (err: unknown) => {
      assert.ok(err instanceof WarrenError);
      assert.equal(err.kind, "invalid_argument");
      assert.match(err.message, message);
      if (typeof value === "string" && value.length > 0)
        assert.ok(!err.message.includes(value), "the message quotes the seed");
      return true;
    },
  );
}

describe("parseSeed (/init's seed)", () => {
  it("decodes 32 bytes of standard base64", () => {
    const bytes = randomBytes(INIT_SEED_BYTES);
    assert.deepEqual(parseSeed(bytes.toString("base64")), bytes);
  });

  it("is absent when the field is", () => {
    assert.equal(parseSeed(undefined), undefined);
    assert.equal(parseSeed(null), undefined);
  });

  it("refuses any other size", () => {
    for (const size of [0, 1, 16, 31, 33, 64]) {
      refused(randomBytes(size).toString("base64"), new RegExp(`32 bytes, got ${size}$`));
    }
  });

  it("refuses what is not standard base64", () => {
    const good = randomBytes(INIT_SEED_BYTES).toString("base64");
    for (const bad of [
      good.replace(/=+$/, ""), // unpadded
      randomBytes(INIT_SEED_BYTES).toString("base64url"), // and unpadded: 43 characters
      `${good.slice(0, 20)}\n${good.slice(20)}`,
      ` ${good}`,
      `${good.slice(0, -2)}!=`,
      "%%%%",
    ]) {
      refused(bad, /standard base64/);
    }
  });

  it("refuses what is not a string", () => {
    for (const bad of [42, true, [], {}, [...randomBytes(INIT_SEED_BYTES)]])
      refused(bad, /standard base64/);
  });
});
