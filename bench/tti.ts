// Time to interactive the way the field measures it (ComputeSDK's benchmarks, METHODOLOGY.md
// and benchmarks/sandbox/*.ts of computesdk/benchmarks): one timer from just before
// `Sandbox.create()` to the result of the first `commands.run('node -v')` (node is in the
// base template), through the unchanged e2b SDK against one node server with its default
// settings. Three modes, as theirs: sequential (create, command, kill, next), staggered (a
// new create every 200 ms whatever the others do, each killed after its command) and burst
// (every create at once, all killed once all have answered; theirs kills each as it
// answers). Failures count against the success rate and are never retried by the bench (the
// SDK's own retry of a 429 with Retry-After stays, as it is the SDK's); their reasons are
// kept. Statistics as theirs: 5 % of the successful samples cut from each end, then median,
// p95, p99 (summarizeTrimmed); min and max from all of them.
// Then whether idle VMMs stay ready: the warm pool's VMMs and paused sandboxes' kept VMMs,
// create → first command (resume → first command) right after they were made against after
// BENCH_TTI_IDLE_MIN minutes with no request, with each QEMU's page faults meanwhile.
// Run: npm run bench:tti (as root). BENCH_TTI_ITERATIONS (100) per mode, BENCH_TTI_BURST
// (= iterations) wide, BENCH_TTI_STAGGER_MS (200), BENCH_TTI_IDLE_MIN (3), BENCH_TTI_KEPT (4)
// paused sandboxes, BENCH_TTI_COMMAND ('node -v'), BENCH_ONLY=modes|idle.
import { join } from "node:path";
import { Sandbox } from "e2b";
import { startServer, type TestServer } from "../test/helpers/server.js";
import { apiSplit } from "./lib/api-probe.js";
import { pooled, poolSettled } from "./lib/pool.js";
import { report, type Summary, summarizeTrimmed } from "./lib/report.js";
import { vmmFaults } from "./lib/vmm-processes.js";

const ITERATIONS = Number(process.env.BENCH_TTI_ITERATIONS ?? 100);
const BURST = Number(process.env.BENCH_TTI_BURST ?? ITERATIONS);
const STAGGER_MS = Number(process.env.BENCH_TTI_STAGGER_MS ?? 200);
const IDLE_MS = Number(process.env.BENCH_TTI_IDLE_MIN ?? 3) * 60_000;
const KEPT = Number(process.env.BENCH_TTI_KEPT ?? 4);
const COMMAND = process.env.BENCH_TTI_COMMAND ?? "node -v";
const ONLY = process.env.BENCH_ONLY;
// ComputeSDK's bounds: 120 s for a create, 30 s for the first command.
const CREATE_TIMEOUT_MS = 120_000;
const COMMAND_TIMEOUT_MS = 30_000;

/** Published TTI p50 (ms), sequential / burst, from the issue (ComputeSDK's tables). */
const PEERS = {
  e2b: { sequential: 366, burst: 471 },
  daytona: { sequential: 136, burst: 705 },
  declaw: { sequential: 38, burst: 226 },
  isorun: { sequential: 13, burst: 48 },
};

const since = (t: number) => performance.now() - t;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const rows: Summary[] = [];
const extra: Record<string, unknown> = {};
process.on("unhandledRejection", (err) => console.error("unhandled (SDK):", err));

interface Attempt {
  /** When it was launched, ms from the start of its mode. */
  readonly launchedAtMs: number;
  readonly ttiMs?: number;
  /** The create's share of it (the API call; the rest is the first command). */
  readonly createMs?: number;
  readonly error?: string;
  readonly sandbox?: Sandbox;
}

/** HTTP status (when the SDK kept one), error class and message: what a failure is counted by. */
function reason(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const status = (err as Error & { statusCode?: number }).statusCode;
  // Addresses differ per sandbox: without them, one cause is one count.
  const message = err.message.replace(/\d+\.\d+\.\d+\.\d+(:\d+)?/g, "<guest>").slice(0, 160);
  return `${status ?? "no status"} ${err.name}: ${message}`;
}

/** One iteration: create → first command, timed; a sandbox whose command failed is killed. */
async function attempt(modeStart: number): Promise<Attempt> {
  const launchedAtMs = since(modeStart);
  const t = performance.now();
  let sandbox: Sandbox | undefined;
  try {
    // The SDK's requestTimeoutMs bounds each request, not the create (its retries of a 429
    // wait beyond it): ComputeSDK's withTimeout bounds the whole call, and so does this.
    sandbox = await within(
      Sandbox.create({ requestTimeoutMs: CREATE_TIMEOUT_MS }),
      CREATE_TIMEOUT_MS,
      "create",
    );
    const createMs = since(t);
    await within(
      sandbox.commands.run(COMMAND, {
        requestTimeoutMs: COMMAND_TIMEOUT_MS,
        timeoutMs: COMMAND_TIMEOUT_MS,
      }),
      COMMAND_TIMEOUT_MS,
      "first command",
    );
    return { launchedAtMs, ttiMs: since(t), createMs, sandbox };
  } catch (err) {
    await sandbox?.kill().catch(() => {});
    return { launchedAtMs, error: reason(err) };
  }
}

/**
 * `call`, or a failure once `ms` have passed (the call goes on: a create that answers later
 * leaves a sandbox that killLeftovers ends).
 */
async function within<T>(call: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} past ${ms} ms (the bench's bound)`)), ms);
  });
  try {
    return await Promise.race([call, late]);
  } finally {
    clearTimeout(timer);
    call.catch(() => {}); // a call given up on may still fail: nobody waits for it
  }
}

/** Kills outside the timed part; a failed kill is reported, not fatal. */
async function kill(a: Attempt): Promise<void> {
  await a.sandbox?.kill().catch((err) => console.error(`kill: ${reason(err)}`));
}

async function sequential(n: number): Promise<Attempt[]> {
  const start = performance.now();
  const done: Attempt[] = [];
  for (let i = 0; i < n; i++) {
    const a = await attempt(start);
    await kill(a);
    done.push(a);
  }
  return done;
}

async function staggered(n: number, delayMs: number): Promise<Attempt[]> {
  const start = performance.now();
  const running: Promise<Attempt>[] = [];
  for (let i = 0; i < n; i++) {
    running.push(
      attempt(start).then(async (a) => {
        await kill(a);
        return a;
      }),
    );
    if (i < n - 1) await sleep(delayMs);
  }
  return Promise.all(running);
}

async function burst(n: number): Promise<Attempt[]> {
  const start = performance.now();
  const done = await Promise.all(Array.from({ length: n }, () => attempt(start)));
  await Promise.all(done.map(kill));
  return done;
}

/**
 * Kills what a mode left running: a create the bench gave up on (past CREATE_TIMEOUT_MS)
 * still finishes on the server, and would hold its VM until its TTL beside the next mode.
 * Every sandbox on this server is the bench's. Gives how many there were.
 */
async function killLeftovers(): Promise<number> {
  let killed = 0;
  // Creates the bench gave up on may still be starting: sweep until two sweeps find none.
  for (let quiet = 0, i = 0; quiet < 2 && i < 36; i++) {
    const ids: string[] = [];
    const pages = Sandbox.list({ query: { state: ["running"] } });
    while (pages.hasNext) for (const s of await pages.nextItems()) ids.push(s.sandboxId);
    await Promise.all(ids.map((id) => Sandbox.kill(id).catch(() => false)));
    killed += ids.length;
    quiet = ids.length === 0 ? quiet + 1 : 0;
    if (quiet < 2) await sleep(5_000);
  }
  return killed;
}

/** The server's answers to creates in its log lines [from, now): status → count. */
function createStatuses(server: TestServer, from: number): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const line of server.logs.slice(from)) {
    if (line.msg !== "api.request" || line.method !== "POST") continue;
    if (!/^(\/v\d+)?\/sandboxes$/.test(String(line.route))) continue;
    const status = String(line.status);
    counts[status] = (counts[status] ?? 0) + 1;
  }
  return counts;
}

/** How many of the sandboxes created in log lines [from, now) took a warmed VMM from the pool. */
function pooledCreates(server: TestServer, from: number): number {
  return server.logs.slice(from).filter((l) => l.msg === "sandbox.vm_up" && l.pooled === true)
    .length;
}

/** Runs one mode after the pool has settled; a row, and its details in `extra`. */
async function mode(
  server: TestServer,
  name: string,
  run: () => Promise<Attempt[]>,
): Promise<void> {
  const poolAtStart = await poolSettled(server);
  const mark = server.logs.length;
  const t = performance.now();
  const attempts = await run();
  const wallClockMs = Math.round(since(t));
  const leftovers = await killLeftovers();
  const ok = attempts.flatMap((a) => (a.ttiMs === undefined ? [] : [a.ttiMs]));
  rows.push(summarizeTrimmed(`TTI ${name} (${COMMAND})`, "ms", ok));
  const failures: Record<string, number> = {};
  for (const a of attempts) if (a.error) failures[a.error] = (failures[a.error] ?? 0) + 1;
  extra[name] = {
    iterations: attempts.length,
    succeeded: ok.length,
    successRate: Math.round((ok.length / Math.max(attempts.length, 1)) * 1000) / 1000,
    failures,
    wallClockMs,
    timeToFirstReadyMs: ok.length > 0 ? Math.round(Math.min(...ok)) : undefined,
    // Where TTI goes: the create (API call) and the first command, p50 of each (trimmed).
    p50Ms: {
      create: summarizeTrimmed(
        "",
        "",
        attempts.flatMap((a) => a.createMs ?? []),
      ).p50,
      firstCommand: summarizeTrimmed(
        "",
        "",
        attempts.flatMap((a) => (a.ttiMs === undefined ? [] : [a.ttiMs - (a.createMs ?? 0)])),
      ).p50,
    },
    poolAtStart,
    leftoversKilled: leftovers,
    pooledCreates: pooledCreates(server, mark),
    createStatuses: createStatuses(server, mark),
    createSplitP50: apiSplit(server.logs, mark).split.create,
    // TTI against launch offset (ComputeSDK's ramp profile), for the staggered mode's story.
    ...(name === "staggered" && {
      ramp: attempts.map((a) => [Math.round(a.launchedAtMs), Math.round(a.ttiMs ?? -1)]),
    }),
  };
}

/**
 * What the command itself costs on a sandbox already up: `COMMAND` again (its binary now in
 * the guest's page cache, its code translated once) and `true`, to split TTI into the
 * create and the command the field happens to run.
 */
async function commandAlone(): Promise<void> {
  const sandbox = await Sandbox.create();
  try {
    for (const cmd of [COMMAND, "true"]) {
      const samples: number[] = [];
      for (let i = 0; i < 10; i++) {
        const t = performance.now();
        await sandbox.commands.run(cmd, { timeoutMs: COMMAND_TIMEOUT_MS });
        samples.push(since(t));
      }
      rows.push(summarizeTrimmed(`command alone on a running sandbox: ${cmd}`, "ms", samples));
    }
  } finally {
    await sandbox.kill();
  }
}

// ---- idle VMMs: do they stay ready? --------------------------------------------------------

interface Timed {
  readonly ms: number;
  /** Page faults of its QEMU from just before the call to the command's answer. */
  readonly minorFaults: number;
  readonly majorFaults: number;
  /** The create took a warmed VMM / the resume was a `cont` of the kept VMM (from the log). */
  readonly ready: boolean;
}

/** Faults of every QEMU of the server now, by pid. */
function faultsByPid(server: TestServer): Map<number, { minor: number; major: number }> {
  return new Map(vmmFaults(join(server.dataDir, "run")).map((f) => [f.pid, f]));
}

/**
 * Times `call` (a create or a resume, then the command) and the page faults its sandbox's
 * QEMU took meanwhile (0 before, for a QEMU that was not running: a restore).
 */
async function timedWithFaults(
  server: TestServer,
  call: () => Promise<Sandbox>,
  ready: (id: string, from: number) => boolean,
): Promise<[Sandbox, Timed]> {
  const before = faultsByPid(server);
  const mark = server.logs.length;
  const t = performance.now();
  const sandbox = await call();
  await sandbox.commands.run(COMMAND, { timeoutMs: COMMAND_TIMEOUT_MS });
  const ms = since(t);
  const runDir = join(server.dataDir, "run");
  const after = vmmFaults(runDir).find((f) => f.cmdline.includes(`${runDir}/${sandbox.sandboxId}`));
  const was = after && before.get(after.pid);
  return [
    sandbox,
    {
      ms,
      minorFaults: after ? after.minor - (was?.minor ?? 0) : Number.NaN,
      majorFaults: after ? after.major - (was?.major ?? 0) : Number.NaN,
      ready: ready(sandbox.sandboxId, mark),
    },
  ];
}

const tookPooled = (server: TestServer) => (id: string, from: number) =>
  server.logs
    .slice(from)
    .some((l) => l.msg === "sandbox.vm_up" && l.sandboxId === id && l.pooled === true);
const resumedKept = (server: TestServer) => (id: string, from: number) =>
  server.logs
    .slice(from)
    .some((l) => l.msg === "sandbox.resumed" && l.sandboxId === id && l.kept === true);

/** Creates `n` sandboxes one after another from the pool as it is, each killed after. */
async function takePool(server: TestServer, n: number): Promise<Timed[]> {
  const out: Timed[] = [];
  for (let i = 0; i < n; i++) {
    const [sandbox, timed] = await timedWithFaults(
      server,
      () => Sandbox.create({ requestTimeoutMs: CREATE_TIMEOUT_MS }),
      tookPooled(server),
    );
    await sandbox.kill();
    out.push(timed);
  }
  return out;
}

/** Resumes each paused sandbox (connect → command), one after another. */
async function resumeKept(server: TestServer, paused: Sandbox[]): Promise<Timed[]> {
  const out: Timed[] = [];
  for (const s of paused) {
    const [, timed] = await timedWithFaults(server, () => s.connect(), resumedKept(server));
    out.push(timed);
  }
  return out;
}

function idleRows(label: string, fresh: Timed[], idle: Timed[]): Record<string, unknown> {
  const p50 = (xs: Timed[]) =>
    summarizeTrimmed(
      "",
      "",
      xs.map((x) => x.ms),
    ).p50;
  const sum = (xs: Timed[], k: "minorFaults" | "majorFaults") =>
    Math.round(xs.reduce((s, x) => s + x[k], 0) / Math.max(xs.length, 1));
  rows.push(
    summarizeTrimmed(
      `${label}: fresh → first command`,
      "ms",
      fresh.map((x) => x.ms),
    ),
  );
  rows.push(
    summarizeTrimmed(
      `${label}: idle ${IDLE_MS / 60_000} min → first command`,
      "ms",
      idle.map((x) => x.ms),
    ),
  );
  return {
    idleOverFresh: Math.round((p50(idle) / p50(fresh)) * 100) / 100,
    fresh: { n: fresh.length, ready: fresh.filter((x) => x.ready).length },
    idle: { n: idle.length, ready: idle.filter((x) => x.ready).length },
    meanFaults: {
      fresh: { minor: sum(fresh, "minorFaults"), major: sum(fresh, "majorFaults") },
      idle: { minor: sum(idle, "minorFaults"), major: sum(idle, "majorFaults") },
    },
  };
}

/**
 * The pool's VMMs and paused sandboxes' kept VMMs, fresh then after IDLE_MS with no request
 * at all: both idle in the same window. Kept ones are resumed first, so that the pool's
 * refills after its takes never run beside them.
 */
async function idleReadiness(server: TestServer): Promise<void> {
  const kept: Sandbox[] = [];
  for (let i = 0; i < KEPT; i++) {
    const s = await Sandbox.create({ timeoutMs: IDLE_MS + 600_000 });
    await s.commands.run(COMMAND);
    kept.push(s);
  }
  const pauseAll = async () => {
    for (const s of kept) await s.pause();
    // The pool refills what the creates took, and a pause's snapshot is hashed after it
    // answered: neither may run beside what is timed next.
    await poolSettled(server);
    await sleep(5_000);
  };
  await pauseAll();
  const keptFresh = await resumeKept(server, kept);
  await pauseAll();
  const freshSize = await pooled(server);
  const poolFresh = await takePool(server, freshSize);
  const idleSize = await poolSettled(server);
  const idleStart = performance.now();
  await sleep(IDLE_MS);
  const keptIdle = await resumeKept(server, kept);
  await Promise.all(kept.map((s) => s.kill()));
  const poolIdle = await takePool(server, idleSize);
  extra.idle = {
    idleMs: Math.round(since(idleStart)),
    pool: idleRows("pooled VMM", poolFresh, poolIdle),
    kept: idleRows("kept VMM (pause → resume)", keptFresh, keptIdle),
  };
}

// A kept VMM must outlive the idle wait (the default keeps one 30 s), or its resume after it
// is a restore and measures nothing about an idle VMM; everything else is the defaults.
const server = await startServer({
  WARREN_LOG_LEVEL: "info",
  WARREN_PAUSE_KEEP_MS: String(IDLE_MS + 300_000),
});
try {
  if (ONLY !== "idle") {
    await mode(server, "sequential", () => sequential(ITERATIONS));
    await mode(server, "staggered", () => staggered(ITERATIONS, STAGGER_MS));
    await mode(server, "burst", () => burst(BURST));
    await poolSettled(server);
    await commandAlone();
  }
  if (ONLY !== "modes") await idleReadiness(server);
} finally {
  await server.stop();
}
extra.method = {
  command: COMMAND,
  iterations: ITERATIONS,
  burst: BURST,
  staggerMs: STAGGER_MS,
  trim: "5 % of successful samples from each end (floor), then median / nearest-rank p95, p99",
  timeoutsMs: { create: CREATE_TIMEOUT_MS, command: COMMAND_TIMEOUT_MS },
  poolSettings: "server defaults (WARREN_POOL_SIZE 2, sized from demand up to 16)",
};
extra.publishedP50Ms = PEERS;
report("tti", rows, extra);
