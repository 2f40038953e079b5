// What every SlotPool must do, seen through the interface: slots of their own, policies set
// and reset, bad policies refused before anything changes, the limit, release and close.
// Runs on FakeSlotPool in the unit tier (test/unit/contracts/) and on NetnsSlotPool, with
// real namespaces, in the e2e tier (test/e2e/network/slot-pool-contract.test.ts).
import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import {
  DEFAULT_EGRESS_POLICY,
  type EgressPolicy,
  type Slot,
  type SlotPool,
  validateEgressPolicy,
} from "../../src/network/index.js";
import { GATEWAY_ADDRESS, GUEST_ADDRESS } from "../../src/protocol/index.js";

/**
 * What an implementation's test file hands the suite: a fresh pool, default policy its own
 * default. A pool that makes slots ahead of need keeps at least one ready, as a server's does,
 * so that every case also meets its background work.
 */
export interface SlotPoolHarness {
  readonly pool: SlotPool;
  /** Closes the pool if the test did not, and removes what the harness made. */
  cleanup(): Promise<void>;
}

const CLOSED: EgressPolicy = { allowInternet: false, allowOut: [], denyOut: [] };
const LISTED: EgressPolicy = {
  allowInternet: false,
  allowOut: ["203.0.113.7", "198.51.100.0/24"],
  denyOut: ["192.0.2.0/24"],
};
const BAD: EgressPolicy = { allowInternet: true, allowOut: ["not-an-address"], denyOut: [] };

const kind = (expected: string) => (err: unknown) => {
  assert.equal((err as { kind?: string }).kind, expected, String(err));
  return true;
};

const exhausted = (err: unknown) => {
  assert.equal((err as { reason?: string }).reason, "network_exhausted", String(err));
  return kind("resource_exhausted")(err);
};

/** Registers the suite; `open` makes a pool of at most `maxSlots` slots for one test. */
export function slotPoolContract(
  name: string,
  open: (options: { maxSlots: number }) => Promise<SlotPoolHarness>,
): void {
  async function use(t: TestContext, maxSlots = 2): Promise<SlotPool> {
    const harness = await open({ maxSlots });
    t.after(harness.cleanup);
    return harness.pool;
  }

  describe(`SlotPool contract: ${name}`, () => {
    it("hands out slots of their own: namespace and host address; the guest's addresses fixed", async (t) => {
      const pool = await use(t);
      await pool.start();
      const a = await pool.acquire();
      const b = await pool.acquire();
      assert.notEqual(a.netns, b.netns);
      assert.notEqual(a.hostAddress, b.hostAddress);
      for (const slot of [a, b]) {
        assert.equal(slot.guestAddress, GUEST_ADDRESS);
        assert.equal(slot.gateway, GATEWAY_ADDRESS);
        assert.ok(slot.tapName.length > 0);
        assert.deepEqual(slot.policy, DEFAULT_EGRESS_POLICY);
      }
      await pool.release(a);
      await pool.release(b);
      await pool.close();
    });

    it("hands out a slot with the policy asked for, and changes it while in use", async (t) => {
      const pool = await use(t);
      const slot = await pool.acquire(LISTED);
      assert.deepEqual(slot.policy, validateEgressPolicy(LISTED));
      await slot.setPolicy(CLOSED);
      assert.deepEqual(slot.policy, validateEgressPolicy(CLOSED));
      await pool.release(slot);
    });

    it("refuses a bad policy before anything changes (invalid_argument)", async (t) => {
      const pool = await use(t, 1);
      await assert.rejects(pool.acquire(BAD), kind("invalid_argument"));
      // Nothing was taken: the one slot is still there.
      const slot = await pool.acquire(CLOSED);
      await assert.rejects(slot.setPolicy(BAD), kind("invalid_argument"));
      assert.deepEqual(slot.policy, validateEgressPolicy(CLOSED), "the slot keeps its policy");
      await pool.release(slot);
    });

    it("resets a released slot to the default policy before handing it out again", async (t) => {
      const pool = await use(t, 1);
      const first = await pool.acquire(CLOSED);
      await pool.release(first);
      const again = await pool.acquire();
      assert.deepEqual(again.policy, DEFAULT_EGRESS_POLICY);
      await pool.release(again);
    });

    it("refuses a slot released twice (invalid_argument)", async (t) => {
      const pool = await use(t);
      const slot: Slot = await pool.acquire();
      await pool.release(slot);
      await assert.rejects(pool.release(slot), kind("invalid_argument"));
    });

    it("hands out at most maxSlots at once (network_exhausted), then the one given back", async (t) => {
      const pool = await use(t, 2);
      const a = await pool.acquire();
      const b = await pool.acquire();
      await assert.rejects(pool.acquire(), exhausted);
      await pool.release(a);
      const c = await pool.acquire();
      await pool.release(b);
      await pool.release(c);
    });

    it("hands out every slot below maxSlots, even while it is making one ahead of need", async (t) => {
      const pool = await use(t, 2);
      const a = await pool.acquire();
      // A pool that keeps slots ready starts making the last one now: that one is still free.
      const b = await pool.acquire();
      assert.notEqual(a.netns, b.netns);
      await pool.release(a);
      await pool.release(b);
      // Again from slots given back (a pool may keep one ready and make the other anew).
      const c = await pool.acquire();
      const d = await pool.acquire();
      assert.notEqual(c.netns, d.netns);
      await assert.rejects(pool.acquire(), exhausted);
      await pool.release(c);
      await pool.release(d);
    });

    it("leaves its own slots alone when it cleans up what an earlier server left", async (t) => {
      const pool = await use(t);
      const slot = await pool.acquire(CLOSED);
      await pool.cleanupStale();
      await slot.setPolicy(DEFAULT_EGRESS_POLICY);
      await pool.release(slot);
      const again = await pool.acquire();
      await pool.release(again);
    });

    it("refuses calls after close as unavailable", async (t) => {
      const pool = await use(t);
      await pool.acquire();
      await pool.close();
      await assert.rejects(pool.acquire(), kind("unavailable"));
    });
  });
}
