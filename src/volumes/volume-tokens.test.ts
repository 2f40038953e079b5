import assert from "node:assert/strict";
import { it } from "node:test";
import { issueVolumeToken, newVolumeKey, tokenRefusal } from "./volume-tokens.js";

const VOLUME = "0b6c2f1e-3a6d-4f4c-9a51-8d8f3b2d7c10";
const NOW = Date.parse("2030-01-01T00:00:00Z");

it("opens its own volume until its expiry, never another's, never under a rotated key", () => {
  const key = newVolumeKey();
  const token = issueVolumeToken(VOLUME, key, NOW + 60_000);
  assert.equal(tokenRefusal(VOLUME, key, token, NOW), undefined);
  assert.equal(tokenRefusal(VOLUME, key, token, NOW + 60_000), "expired");
  assert.equal(tokenRefusal("another-volume", key, token, NOW), "wrong");
  assert.equal(tokenRefusal(VOLUME, newVolumeKey(), token, NOW), "wrong", "after a rotation");
});

it("takes no token it did not sign: a changed expiry, junk, the key itself", () => {
  const key = newVolumeKey();
  const [prefix, expiry, mac] = issueVolumeToken(VOLUME, key, NOW + 60_000).split(".");
  const later = `${prefix}.${Number(expiry) + 3600}.${mac}`;
  assert.equal(tokenRefusal(VOLUME, key, later, NOW), "wrong");
  for (const junk of ["", key, "wvt1", "wvt1..", "wvt1.x.y", `wvt1.${expiry}.${mac}.z`]) {
    assert.notEqual(tokenRefusal(VOLUME, key, junk, NOW), undefined, junk);
  }
});
