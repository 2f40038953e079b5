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

it("a permit released early lets the next holder in while the first still works, once", async () => {
  const semaphore = new Semaphore(1);
  const events: string[] = [];
  let finishFirst: () => void = () => {};
  const first = semaphore.use(async (permit) => {
    events.push("first started");
    permit.release();
    permit.release(); // idempotent: frees one permit, not two
    await new Promise<void>((resolve) => {
      finishFirst = resolve;
    });
    events.push("first ended");
  });
  const second = semaphore.use(async () => {
    events.push("second started");
  });
  const third = semaphore.use(async () => {
    events.push("third started");
  });
  await second;
  await third;
  assert.deepEqual(events, ["first started", "second started", "third started"]);
  finishFirst();
  await first;
  // Still a limit of one: two holders never run at once again.
  let running = 0;
  let peak = 0;
  const job = async () => {
    running += 1;
    peak = Math.max(peak, running);
    await new Promise((resolve) => setTimeout(resolve, 5));
    running -= 1;
  };
  await Promise.all([semaphore.use(job), semaphore.use(job), semaphore.use(job)]);
  assert.equal(peak, 1);
});
