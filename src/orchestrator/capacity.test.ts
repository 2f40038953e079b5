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

it("admits by the host's real memory: 429 memory_pressure before MemAvailable drops below the reserve, counting VMs still starting", () => {
  let available = 3_700;
  const capacity = new Capacity(
    { maxSandboxes: 100, maxVcpus: 100, maxMemoryMiB: 1_000_000, memoryReserveMiB: 3_000 },
    () => available,
  );
  const first = capacity.reserve(shape); // 3700 - 256 ≥ 3000
  capacity.starting();
  const refused = (err: unknown) =>
    err instanceof WarrenError &&
    err.status === 429 &&
    err.reason === "memory_pressure" &&
    /3000 MiB kept in reserve/.test(err.message);
  // The first VMM has not shown in MemAvailable yet: it is counted as starting.
  capacity.reserve(shape); // 3700 - 256 (starting) - 256 ≥ 3000
  capacity.starting();
  assert.throws(() => capacity.reserve(shape), refused);
  first();
  available = 8_192;
  capacity.reserve(shape);
  available = 3_100;
  assert.throws(() => capacity.reserve(shape), refused);
});

it("counts a reserved VM's memory only once it starts, and checks the host again then", () => {
  let available = 3_700;
  const capacity = new Capacity(
    { maxSandboxes: 100, maxVcpus: 100, maxMemoryMiB: 1_000_000, memoryReserveMiB: 3_000 },
    () => available,
  );
  // A burst: all admitted while none has started (each waits its turn in the start queue).
  for (let i = 0; i < 20; i++) capacity.reserve(shape);
  capacity.starting(); // 3700 - 256 ≥ 3000
  capacity.starting(); // 3700 - 256 (starting) - 256 ≥ 3000
  assert.throws(() => capacity.starting(), /memory_pressure|kept in reserve/);
  available = 3_100;
  assert.throws(() => capacity.reserve(shape), /kept in reserve/);
});

it("never refuses for memory with no reserve set", () => {
  const capacity = new Capacity(
    { maxSandboxes: 10, maxVcpus: 100, maxMemoryMiB: 100_000 },
    () => 0,
  );
  capacity.reserve(shape);
});
