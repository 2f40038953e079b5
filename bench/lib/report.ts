import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export interface Summary {
  readonly name: string;
  readonly unit: string;
  readonly n: number;
  readonly p50: number;
  readonly p90: number;
  /** Set by summarizeTrimmed (the field's TTI tables give p95, not p90). */
  readonly p95?: number;
  readonly p99: number;
  readonly min: number;
  readonly max: number;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const index = Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1);
  return sorted[Math.max(index, 0)] as number;
}

export function summarize(name: string, unit: string, samples: number[]): Summary {
  const sorted = [...samples].sort((a, b) => a - b);
  const round = (x: number) => Math.round(x * 100) / 100;
  return {
    name,
    unit,
    n: samples.length,
    p50: round(percentile(sorted, 50)),
    p90: round(percentile(sorted, 90)),
    p99: round(percentile(sorted, 99)),
    min: round(sorted[0] ?? Number.NaN),
    max: round(sorted.at(-1) ?? Number.NaN),
  };
}

/**
 * ComputeSDK's statistics (their src/util/stats.ts, the figures of the TTI tables Warren's
 * are set beside): `trim` of the samples (floor of n × trim) cut from each end, then the
 * median (the mean of the middle two for an even count) and nearest-rank p90/p95/p99 of what
 * is left; min and max from every sample, as theirs are.
 */
export function summarizeTrimmed(
  name: string,
  unit: string,
  samples: number[],
  trim = 0.05,
): Summary {
  const sorted = [...samples].sort((a, b) => a - b);
  const cut = Math.floor(sorted.length * trim);
  const kept = cut > 0 && sorted.length > 2 * cut ? sorted.slice(cut, sorted.length - cut) : sorted;
  const mid = Math.floor(kept.length / 2);
  const median =
    kept.length % 2 === 0
      ? ((kept[mid - 1] ?? Number.NaN) + (kept[mid] ?? Number.NaN)) / 2
      : (kept[mid] ?? Number.NaN);
  const round = (x: number) => Math.round(x * 100) / 100;
  return {
    name,
    unit,
    n: samples.length,
    p50: round(median),
    p90: round(percentile(kept, 90)),
    p95: round(percentile(kept, 95)),
    p99: round(percentile(kept, 99)),
    min: round(sorted[0] ?? Number.NaN),
    max: round(sorted.at(-1) ?? Number.NaN),
  };
}

/** Times `fn` `n` times after `warmup` untimed runs; milliseconds per run. */
export async function measure(
  n: number,
  fn: () => Promise<unknown>,
  warmup = 3,
): Promise<number[]> {
  for (let i = 0; i < warmup; i++) await fn();
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const start = performance.now();
    await fn();
    samples.push(performance.now() - start);
  }
  return samples;
}

export function machine() {
  return {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? "unknown",
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    node: process.version,
  };
}

/** Prints the summaries as a table and writes them, with extra figures, to bench/out/<name>.json. */
export function report(
  benchName: string,
  rows: Summary[],
  extra: Record<string, unknown> = {},
): void {
  // A p95 column only when a row has one (summarizeTrimmed's): other benches' tables stay as they were.
  const p95 = rows.some((r) => r.p95 !== undefined);
  const header = [
    "measure",
    "unit",
    "n",
    "p50",
    "p90",
    ...(p95 ? ["p95"] : []),
    "p99",
    "min",
    "max",
  ];
  const lines = rows.map((r) =>
    [r.name, r.unit, r.n, r.p50, r.p90, ...(p95 ? [r.p95 ?? ""] : []), r.p99, r.min, r.max].map(
      String,
    ),
  );
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => (l[i] ?? "").length)));
  const fmt = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join("  ");
  console.log(fmt(header));
  console.log(widths.map((w) => "-".repeat(w)).join("  "));
  for (const line of lines) console.log(fmt(line));
  for (const [key, value] of Object.entries(extra)) console.log(`${key}: ${JSON.stringify(value)}`);
  const out = join(dirname(fileURLToPath(import.meta.url)), "..", "out", `${benchName}.json`);
  mkdirSync(dirname(out), { recursive: true });
  const json = {
    bench: benchName,
    at: new Date().toISOString(),
    machine: machine(),
    results: rows,
    ...extra,
  };
  writeFileSync(out, `${JSON.stringify(json, null, 2)}\n`);
  console.log(`\nJSON: ${out}`);
}
