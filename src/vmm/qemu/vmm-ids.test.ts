import assert from "node:assert/strict";
import { it } from "node:test";
import { VmmIdentities } from "./vmm-ids.js";

it("gives every running VMM a uid of its own and reuses freed ones last", () => {
  const ids = new VmmIdentities(100_000, 3);
  const a = ids.take();
  const b = ids.take();
  assert.notEqual(a.uid, b.uid);
  assert.equal(a.gid, a.uid);
  ids.give(a);
  const c = ids.take();
  assert.notEqual(c.uid, a.uid, "the freed uid waits its turn");
  assert.deepEqual(new Set([a.uid, b.uid, c.uid]), new Set([100_000, 100_001, 100_002]));
  assert.equal(ids.take().uid, a.uid, "then its turn comes");
  assert.throws(() => ids.take(), /all 3 VMM uids/);
  ids.give(b);
  assert.equal(ids.take().uid, b.uid);
});

it("refuses ranges that include system ids or the invalid uid", () => {
  assert.throws(() => new VmmIdentities(0, 10));
  assert.throws(() => new VmmIdentities(0xffff_fff0, 100));
});

it("claims exactly the uid a reattached VMM runs as, never one in use or out of range", () => {
  const ids = new VmmIdentities(100_000, 3);
  assert.deepEqual(ids.claim(100_001), { uid: 100_001, gid: 100_001 });
  assert.throws(() => ids.claim(100_001), /already in use/);
  assert.throws(() => ids.claim(99_999), /not in the range/);
  assert.throws(() => ids.claim(100_003), /not in the range/);
  assert.throws(() => ids.claim(100_000.5), /not in the range/);
  assert.notEqual(ids.take().uid, 100_001, "take() passes over a claimed uid");
  assert.notEqual(ids.take().uid, 100_001);
  assert.throws(() => ids.take(), /all 3 VMM uids/);
});
