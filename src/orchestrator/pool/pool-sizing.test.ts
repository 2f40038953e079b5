import assert from "node:assert/strict";
import { it } from "node:test";
import { allocate, TemplateDemand } from "./pool-sizing.js";

it("peak: the most creates within any horizon of the window", () => {
  const demand = new TemplateDemand();
  for (const at of [0, 100, 200, 5_000, 20_000, 20_001, 20_002, 20_003]) demand.record(at);
  assert.equal(demand.peak(1_000), 4);
  assert.equal(demand.peak(30_000), 8);
  demand.prune(20_001);
  assert.equal(demand.peak(1_000), 3);
  demand.prune(30_000);
  assert.equal(demand.empty, true);
  assert.equal(demand.peak(1_000), 0);
});

it("allocate: floors first, then the most recently demanded, within the budget", () => {
  const shape = { vcpus: 1, memoryMiB: 100 };
  const wants = [
    { key: "base", shape, floor: 2, wanted: 2, lastDemandAt: 0 },
    { key: "old", shape, floor: 0, wanted: 5, lastDemandAt: 10 },
    { key: "new", shape, floor: 0, wanted: 5, lastDemandAt: 20 },
  ];
  const allowed = allocate(wants, 800);
  assert.deepEqual(
    [...allowed],
    [
      ["base", 2],
      ["new", 5],
      ["old", 1],
    ],
  );
  assert.deepEqual(
    [...allocate(wants, 150)],
    [
      ["base", 1],
      ["new", 0],
      ["old", 0],
    ],
  );
});
