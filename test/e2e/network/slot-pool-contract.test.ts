// The SlotPool contract on NetnsSlotPool: real namespaces, taps, veths and rules of the run's
// names, with one slot kept ready (so the cases meet the background refill). What only this
// pool does (how many it keeps ready, which it removes) is slot-pool.test.ts's.
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
  const pool = new NetnsSlotPool({ ...runPoolOptions(), size: 1, maxSlots });
  return { pool, cleanup: () => pool.close() };
});
