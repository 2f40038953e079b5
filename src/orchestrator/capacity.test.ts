import assert from "node:assert/strict";
import { it } from "node:test";
import { WarrenError } from "../shared/index.js";
import { Capacity } from "./capacity.js";

const shape = { vcpus: 2, memoryMiB: 512 };

it("refuses with resource_exhausted past each limit, naming it, and frees on release", () => {
  const capacity = new Capacity({ maxSandboxes: 2, maxVcpus: 100, maxMemoryMiB: 100_000 });
  const first = capacity.reserve(shape);
  capacity.reserve(shape);
  assert.throws(
    () => capacity.reserve(shape),
    (err: unknown) =>
      err instanceof WarrenError && err.status === 429 && /2 sandboxes/.test(err.message),
  );
  first();
  first(); // twice is harmless
  assert.deepEqual(capacity.usage, { sandboxes: 1, vcpus: 2, memoryMiB: 512 });
  capacity.reserve(shape);
});

it("counts vCPUs and memory", () => {
  const cpu = new Capacity({ maxSandboxes: 10, maxVcpus: 3, maxMemoryMiB: 100_000 });
  cpu.reserve(shape);
  assert.throws(() => cpu.reserve(shape), /vCPUs/);
  const memory = new Capacity({ maxSandboxes: 10, maxVcpus: 100, maxMemoryMiB: 1_000 });
  memory.reserve(shape);
  assert.throws(() => memory.reserve(shape), /MiB/);
});

it("asks its reclaimer for room before refusing, once per VM given up", () => {
  const capacity = new Capacity({ maxSandboxes: 2, maxVcpus: 100, maxMemoryMiB: 100_000 });
  const pooled = [capacity.reserve(shape), capacity.reserve(shape)];
  let asked = 0;
  capacity.reclaimWith(() => {
    asked += 1;
    const release = pooled.pop();
    release?.();
    return release !== undefined;
  });
  assert.equal(capacity.fits(shape), false);
  capacity.reserve(shape);
  assert.equal(asked, 1, "one VM given up was enough");
  capacity.reserve(shape);
  assert.throws(() => capacity.reserve(shape), /2 sandboxes/, "nothing left to give up");
  assert.equal(asked, 3);
});
