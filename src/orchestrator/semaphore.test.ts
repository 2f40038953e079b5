import assert from "node:assert/strict";
import { it } from "node:test";
import { Semaphore } from "./semaphore.js";

it("lets at most `limit` run at once, in arrival order, and survives failures", async () => {
  const semaphore = new Semaphore(2);
  let running = 0;
  let peak = 0;
  const order: number[] = [];
  const job = (i: number) => async () => {
    running += 1;
    peak = Math.max(peak, running);
    order.push(i);
    await new Promise((resolve) => setTimeout(resolve, 10));
    running -= 1;
    if (i === 1) throw new Error("boom");
    return i;
  };
  const results = await Promise.allSettled([0, 1, 2, 3, 4].map((i) => semaphore.use(job(i))));
  assert.equal(peak, 2);
  assert.deepEqual(order, [0, 1, 2, 3, 4]);
  assert.equal(results[1]?.status, "rejected");
  assert.deepEqual(
    results
      .filter((r) => r.status === "fulfilled")
      .map((r) => (r as PromiseFulfilledResult<number>).value),
    [0, 2, 3, 4],
  );
  assert.equal(await semaphore.use(async () => "free again"), "free again");
});
