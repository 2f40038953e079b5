// The microVM driver on this machine, in one run: cold boot, restore (with and without a
// pre-spawned VMM), incremental snapshot (pause and fork capture) at ~2 MB and ~50 MB
// dirtied, and restore / cold boot. Run: npm run bench:vmm (as root; builds images first).
import { rmSync } from "node:fs";
import { join } from "node:path";
import { NetnsSlotPool, type NetworkSlot } from "../src/network/index.js";
import type { Vm, VmSpec } from "../src/vmm/index.js";
import {
  envdUrl,
  initEnvd,
  runInGuest,
  slotVmSpec,
  testVmm,
  waitForEnvd,
} from "../test/helpers/guest.js";
import { runPoolOptions } from "../test/helpers/run-env.js";
import { report, type Summary, summarize } from "./lib/report.js";

const COLD_BOOTS = Number(process.env.BENCH_COLD_BOOTS ?? 3);
const RESTORES = Number(process.env.BENCH_RESTORES ?? 10);
const SNAPSHOTS = Number(process.env.BENCH_SNAPSHOTS ?? 5);
const SHAPE = { vcpus: 1, memoryMiB: 512 };
const TEMPLATE_SETTLE_MS = 2_000;

const { images, driver, accel: probe, work } = await testVmm("bench-vmm");
const pool = new NetnsSlotPool({ ...runPoolOptions(), size: 2 });
let counter = 0;

const spec = (slot: NetworkSlot): VmSpec => slotVmSpec(`b${++counter}`, slot, images, work, SHAPE);

/** Milliseconds from `start` until envd answers /health (polled every 2 ms). */
async function untilReady(slot: NetworkSlot, start: number, vm: Vm): Promise<number> {
  await waitForEnvd(envdUrl(slot.hostAddress), 180_000, vm, 2);
  return performance.now() - start;
}

async function withSlot<T>(fn: (slot: NetworkSlot) => Promise<T>): Promise<T> {
  const slot = await pool.acquire();
  try {
    return await fn(slot);
  } finally {
    await pool.release(slot);
  }
}

const rows: Summary[] = [];
const extra: Record<string, unknown> = {
  accel: probe.accel,
  accelReason: probe.reason,
  shape: SHAPE,
};
try {
  // Cold boot: QEMU start to envd ready.
  const cold: number[] = [];
  for (let i = 0; i < COLD_BOOTS; i++) {
    await withSlot(async (slot) => {
      const start = performance.now();
      const vm = await driver.boot(spec(slot));
      cold.push(await untilReady(slot, start, vm));
      await vm.destroy();
    });
  }
  rows.push(summarize("cold boot → envd ready", "ms", cold));

  // The template every restore starts from: booted, initialised, paused.
  const template = join(work, "template");
  await withSlot(async (slot) => {
    const vm = await driver.boot(spec(slot));
    await untilReady(slot, performance.now(), vm);
    await initEnvd(envdUrl(slot.hostAddress), { defaultUser: "user" });
    // Let the guest settle first, as a template build should: snapshotted right after /init,
    // every restore re-runs envd's and the kernel's follow-up work (~6k more TCG blocks to
    // translate, ~80 ms) before it answers.
    await new Promise((resolve) => setTimeout(resolve, TEMPLATE_SETTLE_MS));
    await vm.snapshot(template, { resume: false });
    await vm.destroy();
  });

  const restoreCold: number[] = [];
  const restoreWarm: number[] = [];
  const restoreWarmed: number[] = [];
  for (let i = 0; i < RESTORES; i++) {
    await withSlot(async (slot) => {
      const start = performance.now();
      const vm = await driver.restore(template, spec(slot));
      restoreCold.push(await untilReady(slot, start, vm));
      await vm.destroy();
    });
    await withSlot(async (slot) => {
      const prepared = await driver.prepareRestore(template, spec(slot));
      const start = performance.now();
      const vm = await prepared.start();
      restoreWarm.push(await untilReady(slot, start, vm));
      await vm.destroy();
    });
    await withSlot(async (slot) => {
      const prepared = await driver.prepareRestore(template, spec(slot));
      await prepared.warm(async () => {
        await waitForEnvd(envdUrl(slot.hostAddress), 30_000);
      });
      const start = performance.now();
      const vm = await prepared.start();
      restoreWarmed.push(await untilReady(slot, start, vm));
      await vm.destroy();
    });
  }
  rows.push(summarize("restore → envd ready (spawn QEMU)", "ms", restoreCold));
  rows.push(summarize("restore → envd ready (pre-spawned VMM)", "ms", restoreWarm));
  rows.push(summarize("restore → envd ready (pre-spawned, warmed VMM)", "ms", restoreWarmed));

  // Incremental snapshots of restored VMs after dirtying ~N MB (tmpfs writes).
  for (const mb of [2, 50]) {
    for (const resume of [false, true]) {
      const paused: number[] = [];
      const dirtyMiB: number[] = [];
      const parts = { deviceState: [] as number[], memory: [] as number[], disk: [] as number[] };
      /** The whole call: the capture, its record and the seal (root's, read-only, SHA-256). */
      const whole: number[] = [];
      for (let i = 0; i < SNAPSHOTS; i++) {
        await withSlot(async (slot) => {
          const vm = await driver.restore(template, spec(slot));
          await untilReady(slot, performance.now(), vm);
          await runInGuest(
            envdUrl(slot.hostAddress),
            `head -c ${mb}M /dev/urandom > /dev/shm/fill`,
          );
          const called = performance.now();
          const timing = await vm.snapshot(join(work, `inc-${mb}-${resume}-${i}`), { resume });
          whole.push(performance.now() - called);
          paused.push(timing.pausedMs);
          parts.deviceState.push(timing.deviceStateMs);
          parts.memory.push(timing.memoryMs);
          parts.disk.push(timing.diskMs);
          dirtyMiB.push((timing.dirtyPages * 4096) / 2 ** 20);
          await vm.destroy();
        });
      }
      const label = resume ? "fork capture (source paused)" : "pause (incremental snapshot)";
      rows.push(summarize(`${label}, ~${mb} MB dirtied`, "ms", paused));
      rows.push(summarize(`${label}, ~${mb} MB dirtied: whole call, sealed`, "ms", whole));
      const key = `${mb}MB_${resume ? "fork" : "pause"}`;
      extra[`dirtyMiB_${key}`] = summarize("dirty", "MiB", dirtyMiB).p50;
      extra[`partsMs_${key}`] = {
        deviceState: summarize("", "ms", parts.deviceState).p50,
        memory: summarize("", "ms", parts.memory).p50,
        disk: summarize("", "ms", parts.disk).p50,
      };
    }
  }

  const p50 = (name: string) => rows.find((r) => r.name.startsWith(name))?.p50 ?? Number.NaN;
  const overColdBoot = (name: string) => Math.round((p50(name) / p50("cold boot")) * 1000) / 1000;
  extra.ratios = {
    restoreWarmedOverColdBoot: overColdBoot("restore → envd ready (pre-spawned, warmed"),
    restorePrespawnedOverColdBoot: overColdBoot("restore → envd ready (pre-spawned VMM)"),
    restoreSpawnOverColdBoot: overColdBoot("restore → envd ready (spawn"),
  };
  extra.targets = {
    "restore (pre-spawned) p50 <= 150 ms": p50("restore → envd ready (pre-spawned VMM)") <= 150,
    "restore (pre-spawned, warmed) p50 <= 150 ms":
      p50("restore → envd ready (pre-spawned, warmed") <= 150,
    "incremental snapshot <= 100 ms at <= 50 MB dirty":
      p50("pause (incremental snapshot), ~50") <= 100,
  };
  report("vmm", rows, extra);
} finally {
  await pool.close();
  rmSync(work, { recursive: true, force: true });
}
