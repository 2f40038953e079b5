import { readFileSync } from "node:fs";

/** Where one QEMU's PSS goes, in KiB, by the kind of mapping that holds it. */
export interface PssBreakdown {
  /** Guest RAM pages the VM wrote since its restore (private copy-on-write, anonymous). */
  readonly guestPrivate: number;
  /** Its share of the snapshot memory file's page cache (the pages it only read). */
  readonly guestShared: number;
  /** TCG's translated-code cache: the one anonymous mapping that is executable. */
  readonly codeCache: number;
  /** Every other anonymous mapping: malloc heap and arenas (TCG's TLBs among them), stacks. */
  readonly otherAnon: number;
  /** QEMU's binary and shared libraries. */
  readonly files: number;
  readonly total: number;
}

interface Mapping {
  readonly perms: string;
  readonly name: string;
  pss: number;
  anon: number;
}

function parseSmaps(pid: number): Mapping[] {
  const mappings: Mapping[] = [];
  let current: Mapping | undefined;
  for (const line of readFileSync(`/proc/${pid}/smaps`, "utf8").split("\n")) {
    const head = /^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      current = { perms: head[1] ?? "", name: head[2] ?? "", pss: 0, anon: 0 };
      mappings.push(current);
      continue;
    }
    const field = /^(Pss|Anonymous):\s+(\d+) kB/.exec(line);
    if (field && current) {
      if (field[1] === "Pss") current.pss = Number(field[2]);
      else current.anon = Number(field[2]);
    }
  }
  return mappings;
}

/**
 * One QEMU's PSS by kind, from /proc/<pid>/smaps. The guest RAM mapping is the one naming
 * `memoryFileName` (a restore maps its snapshot's image privately: the pages the guest wrote
 * are anonymous in it, the rest the file's page cache, shared by every VM of the snapshot).
 */
export function pssBreakdown(pid: number, memoryFileName = "memory"): PssBreakdown {
  let guestPrivate = 0;
  let guestShared = 0;
  let codeCache = 0;
  let otherAnon = 0;
  let files = 0;
  for (const m of parseSmaps(pid)) {
    if (m.name.includes(memoryFileName)) {
      // A private page is counted whole in PSS (its owner is alone): anon ≈ its PSS share.
      guestPrivate += m.anon;
      guestShared += m.pss - m.anon;
    } else if (m.name === "" && m.perms.includes("x")) codeCache += m.pss;
    else if (m.name === "" || m.name.startsWith("[")) otherAnon += m.pss;
    else files += m.pss;
  }
  const total = guestPrivate + guestShared + codeCache + otherAnon + files;
  return { guestPrivate, guestShared, codeCache, otherAnon, files, total };
}

/** The kinds of a breakdown, in the order tables show them. */
export const PSS_KINDS = [
  "guestPrivate",
  "guestShared",
  "codeCache",
  "otherAnon",
  "files",
  "total",
] as const satisfies readonly (keyof PssBreakdown)[];

/** The median of each kind over many VMMs, in MiB (one decimal). */
export function medianBreakdownMiB(all: readonly PssBreakdown[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const key of PSS_KINDS) {
    const sorted = all.map((b) => b[key]).sort((a, b) => a - b);
    const mid = sorted[Math.floor((sorted.length - 1) / 2)] ?? Number.NaN;
    out[key] = Math.round((mid / 1024) * 10) / 10;
  }
  return out;
}

/** The `n` mappings of one QEMU holding the most PSS, as "<MiB> <perms> <name>" lines. */
export function topMappings(pid: number, n = 10): string[] {
  return parseSmaps(pid)
    .sort((a, b) => b.pss - a.pss)
    .slice(0, n)
    .map(
      (m) =>
        `${(m.pss / 1024).toFixed(1)} MiB (anon ${(m.anon / 1024).toFixed(1)}) ${m.perms} ${m.name || "[anon]"}`,
    );
}
