import assert from "node:assert/strict";
import { it } from "node:test";
import { WarrenError } from "../shared/index.js";
import { StartQueue } from "./start-queue.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function refusedWith(reason: string) {
  return (err: unknown) =>
    err instanceof WarrenError &&
    err.reason === reason &&
    err.status === 429 &&
    (err.retryAfterS ?? 0) >= 1;
}

it("grants `concurrency` permits at once and the rest in arrival order", async () => {
  const queue = new StartQueue(2, { maxQueued: 10, maxWaitMs: 5_000 });
  const tickets = Array.from({ length: 5 }, () => queue.enter());
  assert.equal(queue.queued, 3);
  const order: number[] = [];
  const runs = tickets.map(async (ticket, i) => {
    const permit = await ticket.turn();
    order.push(i);
    await sleep(5);
    permit.release();
  });
  await Promise.all(runs);
  assert.deepEqual(order, [0, 1, 2, 3, 4]);
  assert.equal(queue.queued, 0);
});

it("refuses one more than its depth at once, with a Retry-After", async () => {
  const queue = new StartQueue(1, { maxQueued: 2, maxWaitMs: 5_000 });
  const first = queue.enter();
  const waiting = [queue.enter(), queue.enter()];
  assert.throws(() => queue.enter(), refusedWith("start_queue_full"));
  assert.throws(() => queue.enter(), /WARREN_START_QUEUE_DEPTH/);
  (await first.turn()).release();
  for (const ticket of waiting) (await ticket.turn()).release();
  assert.equal(queue.queued, 0);
});

it("refuses at once a start whose estimated wait passes the bound", async () => {
  const queue = new StartQueue(1, { maxQueued: 100, maxWaitMs: 200 });
  // Teach it that a start holds its permit ~60 ms.
  for (let i = 0; i < 3; i++) {
    const permit = await queue.enter().turn();
    await sleep(60);
    permit.release();
  }
  const holder = queue.enter();
  const admitted = [queue.enter(), queue.enter()]; // ~60 and ~120 ms away
  assert.throws(() => {
    for (let i = 0; i < 5; i++) admitted.push(queue.enter());
  }, refusedWith("start_queue_full"));
  assert.ok(admitted.length < 5, `admitted ${admitted.length} waiting, the bound allows ~3`);
  assert.ok(queue.estimatedWaitMs > 200);
  (await holder.turn()).release();
  for (const ticket of admitted) (await ticket.turn()).release();
});

it("refuses waiters the growing estimate no longer gets through, before their bound", async () => {
  // A burst's first arrivals: no start has ended, so all are admitted on the number bound.
  const queue = new StartQueue(1, { maxQueued: 100, maxWaitMs: 1_500 });
  const holder = await queue.enter().turn();
  const t = performance.now();
  const waiting = Array.from({ length: 6 }, () => queue.enter());
  assert.equal(queue.queued, 6);
  // As the first start's hold grows, fewer waiters can be served within 1.5 s at that pace:
  // the others are told so as the queue sees it (every 0.5 s), not when 1.5 s have passed.
  const refusedAt: number[] = [];
  const outcomes = waiting.slice(1).map((ticket) =>
    assert.rejects(ticket.turn(), (err: unknown) => {
      refusedAt.push(performance.now() - t);
      return refusedWith("start_queue_timeout")(err) && /busier than estimated/.test(String(err));
    }),
  );
  await Promise.all(outcomes);
  assert.ok(Math.max(...refusedAt) < 1_500, `refused after ${Math.max(...refusedAt)} ms`);
  assert.equal(queue.queued, 1);
  holder.release();
  (await (waiting[0] as ReturnType<StartQueue["enter"]>).turn()).release();
  assert.equal(queue.queued, 0);
});

it("never sheds a patient waiter (a fork's child) on the estimate, only at its bound", async () => {
  const queue = new StartQueue(1, { maxQueued: 100, maxWaitMs: 1_500 });
  const holder = await queue.enter().turn();
  const patient = Array.from({ length: 5 }, () => queue.enter({ patient: true }));
  const impatient = queue.enter();
  // The estimate would shed all but the first by now (the test above): the patient wait on.
  await assert.rejects(impatient.turn(), /busier than estimated/);
  assert.equal(queue.queued, 5);
  holder.release();
  for (const ticket of patient) (await ticket.turn()).release();
  assert.equal(queue.queued, 0);
});

it("refuses a start that waited its whole bound, and forgets it", async () => {
  const queue = new StartQueue(1, { maxQueued: 10, maxWaitMs: 50 });
  const holder = await queue.enter().turn();
  const late = queue.enter();
  await assert.rejects(late.turn(), refusedWith("start_queue_timeout"));
  assert.equal(queue.queued, 0);
  late.cancel(); // after its refusal: nothing to give back, and no throw
  holder.release();
  const next = await queue.enter().turn();
  next.release();
});

it("skips a cancelled place, and a cancel after the grant gives the permit back", async () => {
  const queue = new StartQueue(1, { maxQueued: 10, maxWaitMs: 5_000 });
  const holder = await queue.enter().turn();
  const gone = queue.enter();
  const next = queue.enter();
  gone.cancel();
  await assert.rejects(gone.turn(), /given up/);
  assert.equal(queue.queued, 1);
  holder.release();
  await next.turn();
  next.cancel(); // granted: its permit goes back
  const after = queue.enter();
  assert.equal(queue.queued, 0, "a free permit, no wait");
  (await after.turn()).release();
});

it("a permit released early lets the next start in while the first still works, once", async () => {
  const queue = new StartQueue(1, { maxQueued: 10, maxWaitMs: 5_000 });
  const first = await queue.enter().turn();
  const second = queue.enter();
  const third = queue.enter();
  first.release();
  first.release(); // idempotent: frees one permit, not two
  const secondPermit = await second.turn();
  assert.equal(queue.queued, 1, "the third still waits: a limit of one");
  secondPermit.release();
  (await third.turn()).release();
  assert.equal(queue.starting, 0);
});
