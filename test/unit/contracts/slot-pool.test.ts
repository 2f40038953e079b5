// The SlotPool contract on FakeSlotPool, the pool the orchestrator's unit tests run on (slots
// are records). NetnsSlotPool's run, with real namespaces:
// test/e2e/network/slot-pool-contract.test.ts.
import { slotPoolContract } from "../../contracts/slot-pool.contract.js";
import { FakeSlotPool } from "../../fakes/fake-slot-pool.js";

slotPoolContract("FakeSlotPool", async ({ maxSlots }) => {
  const pool = new FakeSlotPool(maxSlots);
  return { pool, cleanup: () => pool.close() };
});
