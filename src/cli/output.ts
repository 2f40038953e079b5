import { usage } from "./errors.js";

/** Prints rows under a header, columns padded to their widest cell. */
export function printTable(header: readonly string[], rows: readonly (readonly string[])[]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
      .join("  ")
      .trimEnd();
  process.stdout.write(`${[line(header), ...rows.map(line)].join("\n")}\n`);
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** "5m", "90s", "2h", "1500ms" or bare seconds → milliseconds. */
export function parseDuration(text: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (!match) throw usage(`${text} is not a duration such as 90s, 5m or 2h`);
  const unit = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 }[match[2] ?? "s"] as number;
  return Math.round(Number(match[1]) * unit);
}

/** `k=v` pairs (repeatable option values) → a record. */
export function parsePairs(
  pairs: readonly string[] | undefined,
  what: string,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of pairs ?? []) {
    const at = pair.indexOf("=");
    if (at <= 0) throw usage(`${what} ${pair} is not key=value`);
    out[pair.slice(0, at)] = pair.slice(at + 1);
  }
  return out;
}

/** How long ago, compactly: 42s, 5m, 3h, 2d. */
export function age(since: Date, now = Date.now()): string {
  const s = Math.max(0, Math.round((now - since.getTime()) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86_400)}d`;
}

export function mebibytes(bytes: number | undefined): string {
  return bytes === undefined ? "-" : `${Math.round(bytes / 1024 / 1024)}Mi`;
}

/** Collects a repeatable option's values. */
export function repeatable(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}
