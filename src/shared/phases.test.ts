import assert from "node:assert/strict";
import { it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { addPhase, PhaseTimes, phase, recordPhases } from "./phases.js";

it("times phases exclusive of those inside them, summed by name and by category", async () => {
  const times = new PhaseTimes();
  await recordPhases(times, () =>
    phase("orchestrator", async () => {
      addPhase("orchestrator.lock", 5);
      await phase("vmm.load", async () => {
        await sleep(30);
        await phase("jail.cgroup", () => sleep(200));
      });
      await phase("vmm.cont", () => sleep(10));
    }),
  );
  const json = times.toJSON();
  const ms = (name: string) => json[name] ?? Number.NaN;
  assert.equal(ms("orchestrator.lock"), 5);
  assert.ok(ms("jail.cgroup") >= 199, `jail.cgroup ${ms("jail.cgroup")}`);
  // vmm.load's own 30 ms, not its child's 200 too (bounds loose: machines are noisy).
  assert.ok(ms("vmm.load") >= 29 && ms("vmm.load") < 200, `vmm.load ${ms("vmm.load")}`);
  assert.ok(ms("orchestrator") < 200, `orchestrator's own time ${ms("orchestrator")}`);
  const split = times.byCategory();
  const cat = (name: string) => split[name] ?? Number.NaN;
  assert.deepEqual(Object.keys(split).sort(), ["jail", "orchestrator", "vmm"]);
  assert.ok(Math.abs(cat("vmm") - (ms("vmm.load") + ms("vmm.cont"))) < 0.2);
  assert.ok(Math.abs(times.total() - (cat("vmm") + cat("jail") + cat("orchestrator"))) < 0.5);
});

it("records nothing outside an operation, and keeps concurrent operations apart", async () => {
  assert.equal(await phase("vmm.load", async () => 7), 7);
  addPhase("orchestrator.lock", 3);
  const a = new PhaseTimes();
  const b = new PhaseTimes();
  await Promise.all([
    recordPhases(a, () => phase("guest.init", () => sleep(5))),
    recordPhases(b, () => phase("vmm.spawn", () => sleep(5))),
  ]);
  assert.deepEqual(Object.keys(a.toJSON()), ["guest.init"]);
  assert.deepEqual(Object.keys(b.toJSON()), ["vmm.spawn"]);
});

it("records a phase that fails, and passes its error on", async () => {
  const times = new PhaseTimes();
  await assert.rejects(
    recordPhases(times, () =>
      phase("vmm.load", async () => {
        throw new Error("no state");
      }),
    ),
    /no state/,
  );
  assert.ok("vmm.load" in times.toJSON());
});
