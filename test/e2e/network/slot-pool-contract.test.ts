// The SlotPool contract on NetnsSlotPool: real namespaces, taps, veths and rules of the run's
// names. No idle slots (size 0): with one, a background refill holds an index while it makes
// the slot, and an acquire meanwhile is refused as if all maxSlots were in use (the limit
// case below would fail by timing). Reuse of a released slot, reset, is slot-pool.test.ts's.
// The fake's run: test/unit/contracts/slot-pool.test.ts.
import assert from "node:assert/strict";
import { after, before } from "node:test";
import { NetnsSlotPool } from "../../../src/network/index.js";
import { slotPoolContract } from "../../contracts/slot-pool.contract.js";
import { leakCheck, removeLeftovers } from "../../helpers/leak-check.js";
import { runPoolOptions } from "../../helpers/run-env.js";

before(() => removeLeftovers());
after(async () => {
  assert.deepEqual(await leakCheck(), [], "no namespace, link or rule left behind");
});

slotPoolContract("NetnsSlotPool", async ({ maxSlots }) => {
  const pool = new NetnsSlotPool({ ...runPoolOptions(), size: 0, maxSlots });
  return { pool, cleanup: () => pool.close() };
});
