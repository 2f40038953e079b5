import assert from "node:assert/strict";
import { it } from "node:test";
import pino from "pino";
import type { EnvdMetrics } from "../../protocol/index.js";
import type { GuestAgent } from "../guest/guest-agent.js";
import type { LiveSandbox } from "./live-sandbox.js";
import { MetricsSampler } from "./metrics-sampler.js";
import type { SandboxTable } from "./sandbox-table.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One running sandbox whose VMM's CPU time the test sets, and an envd that counts its calls. */
function setup() {
  const vm = { cpuMs: undefined as number | undefined, cpuTimeMs: async () => vm.cpuMs };
  const live = {
    row: { id: "sbx", state: "running" },
    slot: { hostAddress: "10.0.0.2" },
    vm,
    metrics: [],
  } as unknown as LiveSandbox;
  let asked = 0;
  let memUsed = 64 << 20;
  const agent = {
    metrics: async (): Promise<EnvdMetrics> => {
      asked += 1;
      return {
        ts: 0,
        cpu_count: 2,
        cpu_used_pct: 12.5,
        mem_total: 512 << 20,
        mem_used: memUsed,
        mem_cache: 0,
        mem_total_mib: 512,
        mem_used_mib: memUsed >> 20,
        disk_total: 2 << 30,
        disk_used: 1 << 30,
      };
    },
  } as unknown as GuestAgent;
  const sampler = new MetricsSampler({
    table: { values: () => [live] } as unknown as SandboxTable,
    agent,
    logger: pino({ level: "silent" }),
    intervalMs: 0, // rounds run by hand
  });
  const round = async () => {
    await sleep(20); // time passes between rounds
    await sampler.round();
  };
  return {
    vm,
    live,
    round,
    asked: () => asked,
    setMemUsed: (bytes: number) => {
      memUsed = bytes;
    },
  };
}

it("does not wake an idle guest: repeats its last figures, asks again after five in a row", async () => {
  const { vm, live, round, asked, setMemUsed } = setup();
  vm.cpuMs = 1_000;
  await round();
  assert.equal(asked(), 1, "never asked yet: asked");
  setMemUsed(100 << 20); // what an asked guest would say now
  for (let i = 0; i < 5; i++) await round(); // its VMM used no CPU meanwhile
  assert.equal(asked(), 1, "an idle guest is not woken");
  assert.equal(live.metrics.length, 6, "yet every round has its sample");
  for (const sample of live.metrics.slice(1)) {
    assert.equal(sample.memUsed, 64 << 20, "the last answer's memory");
    assert.equal(sample.cpuUsedPct, 0, "and the VMM's own CPU use: none");
    assert.ok(sample.timestamp > (live.metrics[0]?.timestamp ?? new Date()));
  }
  await round();
  assert.equal(asked(), 2, "the sixth in a row is asked");
  assert.equal(live.metrics.at(-1)?.memUsed, 100 << 20);
});

it("asks a guest whose VMM ran since its last sample, or whose CPU time cannot be told", async () => {
  const { vm, round, asked } = setup();
  vm.cpuMs = 1_000;
  await round();
  vm.cpuMs += 5_000; // it ran: 5 s of CPU in ~20 ms
  await round();
  assert.equal(asked(), 2, "a guest that ran is asked");
  await round();
  assert.equal(asked(), 2, "then idle again: not");
  vm.cpuMs = undefined;
  await round();
  assert.equal(asked(), 3, "a VMM whose CPU time cannot be told: asked");
});

it("asks a sandbox's new VMM (a resume) even when its CPU time looks idle", async () => {
  const { vm, live, round, asked } = setup();
  vm.cpuMs = 5_000;
  await round();
  live.vm = { cpuTimeMs: async () => 10 } as unknown as LiveSandbox["vm"];
  await round();
  assert.equal(asked(), 2);
});
