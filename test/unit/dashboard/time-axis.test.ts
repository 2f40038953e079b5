// The dashboard charts' time axis: whole-second steps, labels as times of day.
import assert from "node:assert/strict";
import { it } from "node:test";
import { TIME_STEPS, timeLabels } from "../../../src/dashboard/app/time-axis.js";

it("steps by whole seconds at the least, and labels each tick as a time of day", () => {
  assert.ok(TIME_STEPS.every((step) => Number.isInteger(step) && step >= 1));
  const at = new Date(2026, 11, 7, 9, 5, 48).getTime() / 1000;
  assert.deepEqual(timeLabels([at, at + 1, at + 60]), ["09:05:48", "09:05:49", "09:06:48"]);
  for (const label of timeLabels([at + 0.5])) assert.doesNotMatch(label, /\./);
});
