// `npm run bench:observability`: what watching a node costs. No VMs:
//
//  - a Prometheus scrape (`NodeMetrics`, the real registry and text format) with 0, 100 and
//    1 000 running sandboxes' per-sandbox gauges, and the size of what it answers;
//  - `Orchestrator.lineage()` (the dashboard's fork trees, polled every 2 s) and `stats()`
//    over 64 sandboxes three generations deep (1 source, 7 children, 8 grandchildren each:
//    the fake node's 64 vCPUs), on the orchestrator over fakes (in-memory catalog and VMMs);
//  - starting the `warren` command (`--version`) against starting bare `node`, the cost of
//    every CLI call before it talks to anyone.
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import type { NodeStats } from "../src/orchestrator/index.js";
import { NodeMetrics } from "../src/server/prometheus.js";
import { createInput } from "../test/contracts/sandbox-service.contract.js";
import { FakeNode } from "../test/fakes/fake-node.js";
import { machine, measure, report, summarize } from "./lib/report.js";

const CLI = join(import.meta.dirname, "..", "dist", "cli", "warren.mjs");

function statsWith(running: number): NodeStats {
  return {
    sandboxesByState: { running },
    pool: { ready: 2, memoryMiB: 1024, templates: 1 },
    sandboxes: Array.from({ length: running }, (_, i) => ({
      sandboxId: `sbx${i.toString(36).padStart(18, "0")}`,
      templateId: "base0000000000000000",
      cpuUsedPct: (i % 100) + 0.5,
      memUsedBytes: 200_000_000 + i,
    })),
    capacity: {
      maxSandboxes: 2000,
      maxVcpus: 4000,
      maxMemoryMiB: 1_000_000,
      sandboxes: running,
      vcpus: running,
      memoryMiB: running * 512,
    },
  };
}

async function scrape(running: number) {
  const stats = statsWith(running);
  const metrics = new NodeMetrics(() => stats);
  const bytes = Buffer.byteLength(await metrics.registry.metrics());
  const samples = await measure(200, () => metrics.registry.metrics(), 20);
  return { row: summarize(`scrape, ${running} running sandboxes`, "ms", samples), bytes };
}

async function forkTree() {
  const node = await FakeNode.start({ maxSandboxes: 64, maxSlots: 64, maxForkCount: 8 });
  try {
    const { orchestrator } = node;
    const source = await orchestrator.create(createInput("base"));
    const children = await orchestrator.fork(source.sandboxId, { count: 7 });
    for (const child of children) {
      if (!("sandbox" in child)) throw new Error("a child did not start");
      await orchestrator.fork(child.sandbox.sandboxId, { count: 8 });
    }
    const count = (await orchestrator.lineage()).length;
    if (count !== 64) throw new Error(`lineage of ${count} sandboxes, not 64`);
    const lineage = await measure(100, () => orchestrator.lineage(), 10);
    const stats = await measure(100, async () => orchestrator.stats(), 10);
    return [
      summarize(`lineage(), ${count} sandboxes`, "ms", lineage),
      summarize(`stats(), ${count} sandboxes`, "ms", stats),
    ];
  } finally {
    await node.close();
  }
}

function spawnTimes(args: string[], n: number): number[] {
  const samples: number[] = [];
  for (let i = 0; i < n + 2; i++) {
    const start = performance.now();
    const run = spawnSync(process.execPath, args, { encoding: "utf8" });
    if (run.status !== 0) throw new Error(`${args.join(" ")}: ${run.stderr}`);
    if (i >= 2) samples.push(performance.now() - start);
  }
  return samples;
}

const scrapes = [await scrape(0), await scrape(100), await scrape(1000)];
const tree = await forkTree();
const bare = spawnTimes(["-e", "0"], 20);
const cli = spawnTimes([CLI, "--version"], 20);
const p50 = (xs: number[]) => summarize("", "ms", xs).p50;
report(
  "observability",
  [
    ...scrapes.map((s) => s.row),
    ...tree,
    summarize("node -e 0", "ms", bare),
    summarize("warren --version", "ms", cli),
  ],
  {
    machine: machine(),
    scrapeBytes: Object.fromEntries(scrapes.map((s, i) => [[0, 100, 1000][i], s.bytes])),
    cliStartOverBareNode: Math.round((p50(cli) / p50(bare)) * 100) / 100,
  },
);
