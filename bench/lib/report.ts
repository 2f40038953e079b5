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
  const header = ["measure", "unit", "n", "p50", "p90", "p99", "min", "max"];
  const lines = rows.map((r) =>
    [r.name, r.unit, r.n, r.p50, r.p90, r.p99, r.min, r.max].map(String),
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
