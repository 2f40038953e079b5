// The operations issue targets are stated for, through the real SDK against one server:
// creates back to back, `commands.run('echo')`, pause/resume (idle and after 50 MB dirtied),
// fork ×16 until every child answers, idle PSS per VMM, and Python in the guest. Each API
// operation's time is split (api, orchestrator, network, jail, vmm, guest) from the
// server's `api.request` lines.
import { join } from "node:path";
import { Sandbox } from "e2b";
import type { LogLine, TestServer } from "../../test/helpers/server.js";
import { poolRefilled } from "./pool.js";
import { PSS_KINDS, pssBreakdown } from "./pss-breakdown.js";
import { type Summary, summarize } from "./report.js";
import { vmmProcesses } from "./vmm-processes.js";

const since = (t: number) => performance.now() - t;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface ProbeCounts {
  readonly creates: number;
  readonly commands: number;
  readonly pauses: number;
  readonly dirtyPauses: number;
  readonly idle: number;
  readonly fork: number;
}

export const DEFAULT_PROBE: ProbeCounts = {
  creates: 20,
  commands: 20,
  pauses: 10,
  dirtyPauses: 5,
  idle: 21,
  fork: 16,
};

/** BENCH_QUICK=1: a few of each, to see where time goes while working on it. */
export const QUICK_PROBE: ProbeCounts = {
  creates: 5,
  commands: 10,
  pauses: 3,
  dirtyPauses: 2,
  idle: 4,
  fork: 4,
};

/** The API operations split, by the route of their `api.request` line. */
const OPERATIONS: Record<string, string> = {
  "POST /sandboxes": "create",
  "POST /sandboxes/:sandboxID/pause": "pause",
  "POST /sandboxes/:sandboxID/connect": "resume (connect)",
  "POST /sandboxes/:sandboxID/fork": "fork",
  "POST /sandboxes/:sandboxID/snapshots": "snapshot",
  "DELETE /sandboxes/:sandboxID": "kill",
};

export const SPLIT_CATEGORIES = ["api", "orchestrator", "network", "jail", "vmm", "guest"];

export interface ProbeResult {
  readonly rows: Summary[];
  /** p50 ms by operation, then by category (and `total`). */
  readonly split: Record<string, Record<string, number>>;
  /** p50 ms by operation, then by phase. */
  readonly phases: Record<string, Record<string, number>>;
}

function p50(samples: number[]): number {
  return summarize("", "", samples).p50;
}

/** p50 of each category and phase per operation, from the lines logged in [from, to). */
export function apiSplit(logs: readonly LogLine[], from: number, to = logs.length) {
  const byOp = new Map<string, LogLine[]>();
  for (const line of logs.slice(from, to)) {
    if (line.msg !== "api.request" || !line.split) continue;
    // The SDK calls some of them under /v2 (same operation, newer body).
    const route = String(line.route).replace(/^\/v\d+\//, "/");
    const op = OPERATIONS[`${String(line.method)} ${route}`];
    if (!op || Number(line.status) >= 400) continue;
    byOp.set(op, [...(byOp.get(op) ?? []), line]);
  }
  const split: Record<string, Record<string, number>> = {};
  const phases: Record<string, Record<string, number>> = {};
  for (const [op, lines] of byOp) {
    const of = (field: "split" | "phases", key: string) =>
      p50(lines.map((l) => (l[field] as Record<string, number>)[key] ?? 0));
    split[op] = { total: p50(lines.map((l) => Number(l.durationMs))) };
    for (const category of SPLIT_CATEGORIES) split[op][category] = of("split", category);
    const names = new Set(lines.flatMap((l) => Object.keys(l.phases as object)));
    phases[op] = {};
    for (const name of [...names].sort()) phases[op][name] = of("phases", name);
  }
  return { split, phases };
}

/** Polls the sandbox's port 8000 through the proxy (E2B's routing headers) until it answers. */
async function untilServing(server: TestServer, sandbox: Sandbox, t: number): Promise<number> {
  const headers = { "e2b-sandbox-id": sandbox.sandboxId, "e2b-sandbox-port": "8000" };
  for (let i = 0; i < 3000; i++) {
    const res = await fetch(server.url, { headers, signal: AbortSignal.timeout(10_000) }).catch(
      () => undefined,
    );
    if (res?.status === 200) return since(t);
    await res?.body?.cancel();
    await sleep(20);
  }
  throw new Error("python3 -m http.server never answered");
}

export interface ProbeOptions {
  /** The server's warm pool: commands are timed once it is full again, not during a refill. */
  readonly poolSize: number;
  /** Commands, pauses and resumes alone (a server whose pauses keep no VMM). */
  readonly resumesOnly?: boolean;
  /**
   * No 100 MB working set and no Python: the operations every tree of Warren has (an old
   * commit's base image may lack Python), as bench/old-vs-head.ts compares them.
   */
  readonly coreOnly?: boolean;
}

/** Runs every operation once per count against `server`; rows are named with `label`. */
export async function probe(
  server: TestServer,
  label: string,
  counts: ProbeCounts,
  { poolSize, resumesOnly = false, coreOnly = false }: ProbeOptions,
): Promise<ProbeResult> {
  const rows: Summary[] = [];
  const mark = server.logs.length;
  const row = (name: string, samples: number[], unit = "ms") =>
    rows.push(summarize(`${name}${label}`, unit, samples));

  // ---- creates: from a full pool, then back to back -------------------------------------
  // From a full pool: what one create costs. Back to back: the pool refills on the same two
  // cores meanwhile, and a create that finds it empty waits for a restore.
  let pooledSplit: ReturnType<typeof apiSplit> | undefined;
  for (const refilled of resumesOnly ? [] : [true, false]) {
    const createApi: number[] = [];
    const createToCommand: number[] = [];
    const from = server.logs.length;
    for (let i = 0; i < counts.creates; i++) {
      if (refilled) await poolRefilled(server, poolSize);
      const t = performance.now();
      const sandbox = await Sandbox.create();
      createApi.push(since(t));
      await sandbox.commands.run("true");
      createToCommand.push(since(t));
      await sandbox.kill();
    }
    const how = refilled ? "pool refilled" : "back to back";
    row(`create (API call), ${how}`, createApi);
    row(`create → first command, ${how}`, createToCommand);
    if (refilled) pooledSplit = apiSplit(server.logs, from, server.logs.length);
  }

  // ---- commands, pause and resume on one sandbox ---------------------------------------
  const sandbox = await Sandbox.create({ timeoutMs: 600_000 });
  await poolRefilled(server, poolSize);
  const echoes: number[] = [];
  for (let i = 0; i < counts.commands + 3; i++) {
    const t = performance.now();
    await sandbox.commands.run("echo hi");
    if (i >= 3) echoes.push(since(t)); // the first calls warm the guest's paths
  }
  row("commands.run('echo')", echoes);
  const pauses: number[] = [];
  const resumes: number[] = [];
  const resumeToCommand: number[] = [];
  for (let i = 0; i < counts.pauses; i++) {
    let t = performance.now();
    await sandbox.pause();
    pauses.push(since(t));
    t = performance.now();
    await sandbox.connect();
    resumes.push(since(t));
    await sandbox.commands.run("true");
    resumeToCommand.push(since(t));
  }
  row("pause, idle (API call)", pauses);
  row("resume (connect, API call)", resumes);
  row("resume → command", resumeToCommand);
  const dirtyPauses: number[] = [];
  for (let i = 0; i < counts.dirtyPauses; i++) {
    await sandbox.commands.run(`head -c 50M /dev/urandom > /dev/shm/dirty-${i % 2}`);
    const t = performance.now();
    await sandbox.pause();
    dirtyPauses.push(since(t));
    await sandbox.connect();
  }
  row("pause after 50 MB dirtied (API call)", dirtyPauses);
  await sandbox.kill();

  // ---- a read-heavy sandbox resumed: 100 MB working set in its memory ---------------------
  if (!coreOnly) {
    const heavy = await Sandbox.create({ timeoutMs: 600_000 });
    await heavy.commands.run("head -c 100M /dev/urandom > /dev/shm/working-set");
    const firstCommand: number[] = [];
    const fullRead: number[] = [];
    for (let i = 0; i < Math.max(2, Math.ceil(counts.pauses / 3)); i++) {
      await heavy.pause();
      const t = performance.now();
      await heavy.connect();
      await heavy.commands.run("true");
      firstCommand.push(since(t));
      await heavy.commands.run("cat /dev/shm/working-set > /dev/null");
      fullRead.push(since(t));
    }
    row("resume 100 MB working set → first command", firstCommand);
    row("resume 100 MB working set → all of it read", fullRead);
    await heavy.kill();
  }

  if (resumesOnly) return { rows, ...apiSplit(server.logs, mark) };

  // ---- fork -----------------------------------------------------------------------------
  {
    const source = await Sandbox.create({ timeoutMs: 600_000 });
    await source.commands.run("head -c 20M /dev/urandom > /dev/shm/state");
    const t = performance.now();
    const results = await source.fork({ count: counts.fork });
    const children = results.filter((r): r is Sandbox => r instanceof Sandbox);
    await Promise.all(children.map((c) => c.commands.run("true")));
    row(`fork ×${counts.fork}, every child answering`, [since(t)]);
    if (children.length !== counts.fork) {
      console.error(`fork: ${counts.fork - children.length} children failed`);
    }
    await Promise.all([source, ...children].map((s) => s.kill()));
  }

  // ---- Python in the guest ---------------------------------------------------------------
  if (!coreOnly) {
    const firstPython: number[] = [];
    const httpServer: number[] = [];
    for (let i = 0; i < 3; i++) {
      let t = performance.now();
      let s = await Sandbox.create();
      await s.commands.run("python3 -c 'print(1)'");
      firstPython.push(since(t));
      await s.kill();
      t = performance.now();
      s = await Sandbox.create();
      await s.commands.run("python3 -m http.server 8000", { background: true, timeoutMs: 0 });
      httpServer.push(await untilServing(server, s, t));
      await s.kill();
    }
    row("create → first python3 -c", firstPython);
    row("create → python3 -m http.server answering", httpServer);
  }

  // ---- idle PSS -----------------------------------------------------------------------------
  {
    const idle: Sandbox[] = [];
    for (let i = 0; i < counts.idle; i++) idle.push(await Sandbox.create({ timeoutMs: 600_000 }));
    await sleep(30_000); // guests settle after a restore (envd's GC, deferred kernel work)
    const vmms = vmmProcesses(join(server.dataDir, "run"));
    row(
      `idle PSS per VMM, ${counts.idle} held`,
      vmms.map((p) => p.pssKiB / 1024),
      "MiB",
    );
    // Where it goes, by kind of mapping (pss-breakdown.ts): what a difference between two
    // trees or two settings is made of.
    const kinds = vmms.map((p) => pssBreakdown(p.pid));
    for (const kind of PSS_KINDS) {
      row(
        `idle PSS per VMM: ${kind}`,
        kinds.map((b) => b[kind] / 1024),
        "MiB",
      );
    }
    await Promise.all(idle.map((s) => s.kill()));
  }

  const { split, phases } = apiSplit(server.logs, mark);
  if (pooledSplit?.split.create && pooledSplit.phases.create) {
    split["create, pool refilled"] = pooledSplit.split.create;
    phases["create, pool refilled"] = pooledSplit.phases.create;
  }
  return { rows, split, phases };
}

/** The split as table rows: one per operation and category, p50 ms. */
export function splitRows(result: ProbeResult, label: string): Summary[] {
  return Object.entries(result.split).flatMap(([op, categories]) =>
    Object.entries(categories)
      .filter(([, ms]) => ms > 0)
      .map(([category, ms]) => summarize(`split ${op}: ${category}${label}`, "ms", [ms])),
  );
}
