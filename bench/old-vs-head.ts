// An old commit of Warren (BENCH_OLD_REF, default c5b94b4: the tree measured on
// 2026-12-01) and HEAD, measured by the same probe through the real e2b SDK on this machine
// in one run, alternating: rounds old → HEAD, then HEAD → old, and so on, one server running
// at a time, so both meet the same host. Each tree is built from a temporary git worktree
// (bench/lib/old-tree.ts); each server lives in a network namespace of the run's.
// Per metric: the median over rounds of each round's p50, the ratio HEAD/old, and the spread
// of the round p50s; HEAD is "slower beyond noise" when every HEAD round is slower than every
// old round. Then where the time goes, from the lines both trees log (api.request,
// sandbox.vm_up, .paused, .resumed, .forked, .captured), and HEAD's own phase split.
// Knobs: BENCH_ROUNDS (default 3 per tree), BENCH_QUICK=1 (tiny counts, a smoke run),
// BENCH_OLD_TREE (a tree prepared already: no worktree, no build). Not WARREN_*: the run
// sandbox (scripts/run-sandbox.mjs) passes no server setting of the caller's shell on.
// Run: npm run bench:old-vs-head (as root; measured runs under flock /tmp/warren-bench.lock).
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { addNetnsHost, netnsServerEnv, startServerIn } from "../test/helpers/netns-host.js";
import { runEnv } from "../test/helpers/run-env.js";
import type { LogLine, TestServer } from "../test/helpers/server.js";
import { type ProbeCounts, type ProbeResult, probe } from "./lib/api-probe.js";
import { oldImages, prepareOldTree, startOldServer } from "./lib/old-tree.js";
import { poolRefilled } from "./lib/pool.js";
import { PSS_KINDS } from "./lib/pss-breakdown.js";
import { report, type Summary, summarize } from "./lib/report.js";

const REPO = join(import.meta.dirname, "..");
const OLD_REF = process.env.BENCH_OLD_REF ?? "c5b94b4";
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const QUICK = process.env.BENCH_QUICK === "1";
/** The operations; no dirtied pauses (the probe's other figures are HEAD-era). */
const COUNTS: ProbeCounts = QUICK
  ? { creates: 2, commands: 5, pauses: 2, dirtyPauses: 0, idle: 2, fork: 1 }
  : { creates: 8, commands: 20, pauses: 5, dirtyPauses: 0, idle: 8, fork: 16 };
const POOL_SIZE = 2;
/**
 * Both servers alike: a fixed warm pool of 2, and pauses that let their VMM go (old trees
 * keep none, so every resume is a restore in both).
 */
const COMMON_ENV = {
  WARREN_POOL_SIZE: String(POOL_SIZE),
  WARREN_POOL_MAX_PER_TEMPLATE: "0",
  WARREN_PAUSE_KEEP_MS: "0",
  WARREN_PORT: "3000",
};

type Side = "old" | "head";

interface Round {
  readonly side: Side;
  readonly round: number;
  readonly result: ProbeResult;
  /** The server's log lines of the probe. */
  readonly lines: LogLine[];
  readonly host: HostSample;
}

/** What the host did meanwhile: load average, and CPU time stolen by the hypervisor. */
interface HostSample {
  readonly loadBefore: number;
  readonly loadAfter: number;
  readonly stealPct: number;
  readonly wallMs: number;
}

function cpuTicks(): { steal: number; total: number } {
  const fields = (readFileSync("/proc/stat", "utf8").split("\n")[0] ?? "")
    .trim()
    .split(/\s+/)
    .slice(1)
    .map(Number);
  return { steal: fields[7] ?? 0, total: fields.reduce((a, b) => a + b, 0) };
}

const loadAverage = () => Number(readFileSync("/proc/loadavg", "utf8").split(" ")[0]);

/** Runs `fn`, sampling the host around it. */
async function sampled<T>(fn: () => Promise<T>): Promise<[T, HostSample]> {
  const t = performance.now();
  const loadBefore = loadAverage();
  const before = cpuTicks();
  const value = await fn();
  const after = cpuTicks();
  const stealPct = (100 * (after.steal - before.steal)) / Math.max(after.total - before.total, 1);
  return [
    value,
    {
      loadBefore,
      loadAfter: loadAverage(),
      stealPct: Math.round(stealPct * 10) / 10,
      wallMs: Math.round(performance.now() - t),
    },
  ];
}

/** Points the SDK at `server` (the probe creates sandboxes through the environment). */
function useSdkOn(server: TestServer): void {
  process.env.E2B_API_URL = server.url;
  process.env.E2B_SANDBOX_URL = server.url;
  process.env.E2B_API_KEY = server.apiKey;
  delete process.env.E2B_DEBUG;
}

/** One round of one side: its server started, probed once its pool is full, stopped. */
async function measure(side: Side, round: number, start: () => Promise<TestServer>) {
  const server = await start();
  try {
    useSdkOn(server);
    await poolRefilled(server, POOL_SIZE);
    const from = server.logs.length;
    const [result, host] = await sampled(() =>
      probe(server, "", COUNTS, { poolSize: POOL_SIZE, coreOnly: true }),
    );
    const lines = server.logs.slice(from);
    console.error(`round ${round} ${side}: ${host.wallMs} ms, load ${host.loadAfter}`);
    return { side, round, result, lines, host } satisfies Round;
  } finally {
    const code = await server.stop();
    if (code !== 0) console.error(`${side} server exited with ${code}`);
  }
}

// ---- the comparison ------------------------------------------------------------------

/** The probe's rows the issue names, by the probe's row name. */
const METRICS = [
  "create → first command, pool refilled",
  "create → first command, back to back",
  "create (API call), pool refilled",
  "commands.run('echo')",
  "pause, idle (API call)",
  "resume (connect, API call)",
  "resume → command",
  `fork ×${COUNTS.fork}, every child answering`,
  `idle PSS per VMM, ${COUNTS.idle} held`,
  ...PSS_KINDS.filter((k) => k !== "total").map((kind) => `idle PSS per VMM: ${kind}`),
];

interface Comparison {
  readonly name: string;
  readonly unit: string;
  readonly old: number;
  readonly head: number;
  readonly ratio: number;
  readonly oldRange: [number, number];
  readonly headRange: [number, number];
  /** slower: every HEAD round above every old round; faster: the reverse; else within noise. */
  readonly verdict: "slower" | "faster" | "same";
}

const median = (xs: number[]) => summarize("", "", xs).p50;
const round2 = (x: number) => Math.round(x * 100) / 100;

function roundP50s(rounds: readonly Round[], side: Side, name: string): Summary[] {
  return rounds
    .filter((r) => r.side === side)
    .map((r) => r.result.rows.find((row) => row.name === name))
    .filter((row): row is Summary => row !== undefined && Number.isFinite(row.p50));
}

function compare(rounds: readonly Round[], name: string): Comparison | undefined {
  const old = roundP50s(rounds, "old", name);
  const head = roundP50s(rounds, "head", name);
  if (old.length === 0 || head.length === 0) return undefined;
  const o = old.map((r) => r.p50);
  const h = head.map((r) => r.p50);
  const verdict =
    Math.min(...h) > Math.max(...o)
      ? "slower"
      : Math.max(...h) < Math.min(...o)
        ? "faster"
        : "same";
  return {
    name,
    unit: old[0]?.unit ?? "",
    old: median(o),
    head: median(h),
    ratio: round2(median(h) / median(o)),
    oldRange: [Math.min(...o), Math.max(...o)],
    headRange: [Math.min(...h), Math.max(...h)],
    verdict,
  };
}

function printComparison(rows: readonly Comparison[]): void {
  const header = [
    "measure",
    "unit",
    "old p50",
    "head p50",
    "head/old",
    "old rounds",
    "head rounds",
    "",
  ];
  const lines = rows.map((r) => [
    r.name,
    r.unit,
    String(r.old),
    String(r.head),
    String(r.ratio),
    `${r.oldRange[0]}–${r.oldRange[1]}`,
    `${r.headRange[0]}–${r.headRange[1]}`,
    r.verdict === "same" ? "within noise" : `HEAD ${r.verdict}`,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => (l[i] ?? "").length)));
  const fmt = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join("  ");
  console.log(fmt(header));
  for (const line of lines) console.log(fmt(line));
}

// ---- where the time goes, from the lines both trees log ---------------------------------

/** The p50 of each field the lines of `msg` (matching `when`) carry, over every round of a side. */
function fieldP50s(
  rounds: readonly Round[],
  side: Side,
  msg: string,
  fields: readonly string[],
  when: (l: LogLine) => boolean = () => true,
): Record<string, number> {
  const lines = rounds
    .filter((r) => r.side === side)
    .flatMap((r) => r.lines)
    .filter((l) => l.msg === msg && when(l));
  const out: Record<string, number> = { n: lines.length };
  for (const field of fields) {
    const values = lines.map((l) => Number(l[field])).filter(Number.isFinite);
    if (values.length > 0) out[field] = median(values);
  }
  return out;
}

const ROUTE_OPS: Record<string, string> = {
  "POST /sandboxes": "create",
  "POST /sandboxes/:sandboxID/pause": "pause",
  "POST /sandboxes/:sandboxID/connect": "connect",
  "POST /sandboxes/:sandboxID/fork": "fork",
  "DELETE /sandboxes/:sandboxID": "kill",
};

/** Server-side time per API operation (`api.request` durationMs), p50 over the side's rounds. */
function apiTotals(rounds: readonly Round[], side: Side): Record<string, number> {
  const byOp: Record<string, number[]> = {};
  for (const line of rounds.filter((r) => r.side === side).flatMap((r) => r.lines)) {
    if (line.msg !== "api.request" || Number(line.status) >= 400) continue;
    const route = String(line.route).replace(/^\/v\d+\//, "/");
    const op = ROUTE_OPS[`${String(line.method)} ${route}`];
    if (op) byOp[op] = [...(byOp[op] ?? []), Number(line.durationMs)];
  }
  return Object.fromEntries(Object.entries(byOp).map(([op, xs]) => [op, median(xs)]));
}

const TIMING = ["pausedMs", "deviceStateMs", "memoryMs", "diskMs", "dirtyPages"];

/** Sandboxes paused in any round: a VM brought up for one of them later is a resume's restore. */
function pausedIds(rounds: readonly Round[]): Set<unknown> {
  return new Set(
    rounds
      .flatMap((r) => r.lines)
      .flatMap((l) => (l.msg === "sandbox.paused" ? [l.sandboxId] : [])),
  );
}

function serverSplit(rounds: readonly Round[], side: Side) {
  const paused = pausedIds(rounds);
  return {
    api: apiTotals(rounds, side),
    "vm_up pooled": fieldP50s(
      rounds,
      side,
      "sandbox.vm_up",
      ["vmMs", "initMs"],
      (l) => l.pooled === true,
    ),
    "vm_up restore": fieldP50s(
      rounds,
      side,
      "sandbox.vm_up",
      ["vmMs", "initMs"],
      (l) => l.pooled !== true && !paused.has(l.sandboxId),
    ),
    "vm_up resume": fieldP50s(
      rounds,
      side,
      "sandbox.vm_up",
      ["vmMs", "initMs"],
      (l) => l.pooled !== true && paused.has(l.sandboxId),
    ),
    paused: fieldP50s(rounds, side, "sandbox.paused", TIMING),
    resumed: fieldP50s(rounds, side, "sandbox.resumed", ["durationMs"]),
    "fork capture": fieldP50s(rounds, side, "sandbox.captured", TIMING, (l) => l.kind === "fork"),
    forked: fieldP50s(rounds, side, "sandbox.forked", ["durationMs", "started"]),
  };
}

/** HEAD's phase split (api.request `phases`) per operation: p50 per phase, over its rounds. */
function headPhases(rounds: readonly Round[]): Record<string, Record<string, number>> {
  const out: Record<string, Record<string, number[]>> = {};
  for (const r of rounds.filter((x) => x.side === "head")) {
    for (const [op, phases] of Object.entries(r.result.phases)) {
      const byPhase = out[op] ?? {};
      for (const [phase, ms] of Object.entries(phases))
        byPhase[phase] = [...(byPhase[phase] ?? []), ms];
      out[op] = byPhase;
    }
  }
  return Object.fromEntries(
    Object.entries(out).map(([op, phases]) => [
      op,
      Object.fromEntries(Object.entries(phases).map(([p, xs]) => [p, median(xs)])),
    ]),
  );
}

function printSplit(split: Record<Side, ReturnType<typeof serverSplit>>): void {
  console.log("\nserver-side p50 ms (both trees' own lines): old → head");
  for (const [part, values] of Object.entries(split.old)) {
    const head = split.head[part as keyof typeof split.head] as Record<string, number>;
    const keys = new Set([...Object.keys(values), ...Object.keys(head)]);
    const cells = [...keys].map(
      (k) => `${k} ${(values as Record<string, number>)[k] ?? "-"} → ${head[k] ?? "-"}`,
    );
    console.log(`  ${part}: ${cells.join(", ")}`);
  }
}

// ---- the run -------------------------------------------------------------------------------

async function main(): Promise<void> {
  const startedAt = new Date().toISOString();
  const headCommit = execFileSync("git", ["rev-parse", "HEAD"], {
    cwd: REPO,
    encoding: "utf8",
  }).trim();
  const tree = await prepareOldTree(REPO, OLD_REF);
  const hosts = [await addNetnsHost(0), await addNetnsHost(1)] as const;
  try {
    const images = oldImages(tree);
    console.error(
      `old tree ${tree.commit} built in ${tree.buildMs} ms, images in ${images.setupMs} ms`,
    );
    const starts: Record<Side, () => Promise<TestServer>> = {
      old: () =>
        startOldServer(tree, hosts[0], join(runEnv().dataDir, "old"), images.imagesDir, COMMON_ENV),
      head: () =>
        startServerIn(hosts[1], {
          ...netnsServerEnv(hosts[1], 2, "head", 3000),
          WARREN_LOG_LEVEL: "info",
          ...COMMON_ENV,
        }),
    };
    const rounds: Round[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const order: Side[] = i % 2 === 0 ? ["old", "head"] : ["head", "old"];
      for (const side of order) rounds.push(await measure(side, i, starts[side]));
    }
    finish(rounds, {
      startedAt,
      oldRef: OLD_REF,
      oldCommit: tree.commit,
      headCommit,
      oldBuildMs: tree.buildMs,
      oldImagesSetupMs: images.setupMs,
      counts: COUNTS,
    });
  } finally {
    for (const host of hosts) await host.remove();
    tree.remove();
  }
}

function finish(rounds: readonly Round[], meta: Record<string, unknown>): void {
  const comparisons = METRICS.map((m) => compare(rounds, m)).filter(
    (c): c is Comparison => c !== undefined,
  );
  printComparison(comparisons);
  const split = { old: serverSplit(rounds, "old"), head: serverSplit(rounds, "head") };
  printSplit(split);
  const phases = headPhases(rounds);
  console.log(`\nHEAD's phases (p50 ms): ${JSON.stringify(phases)}`);
  const rows = comparisons.flatMap((c) =>
    (["old", "head"] as const).map((side) =>
      summarize(
        `${c.name} (${side}, round p50s)`,
        c.unit,
        roundP50s(rounds, side, c.name).map((r) => r.p50),
      ),
    ),
  );
  report("old-vs-head", rows, {
    ...meta,
    comparisons,
    serverSplit: split,
    headPhases: phases,
    hostByRound: rounds.map((r) => ({ side: r.side, round: r.round, ...r.host })),
  });
}

await main();
