// Density: how many idle sandboxes one node holds with its default settings, what each VMM
// costs (PSS by kind of mapping), and whether every one still answers afterwards. Then memory
// per fork child after a real workload in the parent (a pip-style install of a few MB).
//
// One server, default settings (KSM off unless the environment says otherwise: levers are
// tried by setting WARREN_* variables around `node scripts/bench.mjs density`).
// BENCH_DENSITY (default 400) sandboxes are created through the e2b SDK, BENCH_DENSITY_CREATORS
// at a time (default 2); BENCH_DENSITY_SETTLE_S (default 60) seconds later PSS and CPU of
// every VMM are read; then every sandbox runs a command (BENCH_DENSITY_EXERCISE at a time,
// default 8). BENCH_DENSITY_FORK=0 skips the fork part, BENCH_DENSITY_FORK_COUNT sizes it (16). The run sandbox drops WARREN_*
// variables, so server settings for a lever come as BENCH_DENSITY_SERVER_ENV="K=V,K=V".
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { leakCheck, qemuPidsIn } from "../test/helpers/leak-check.js";
import { startServer, type TestServer } from "../test/helpers/server.js";
import { medianBreakdownMiB, pssBreakdown, topMappings } from "./lib/pss-breakdown.js";
import { report, type Summary, summarize } from "./lib/report.js";
import { vmmProcesses } from "./lib/vmm-processes.js";

const TARGET = Number(process.env.BENCH_DENSITY ?? 400);
const CREATORS = Number(process.env.BENCH_DENSITY_CREATORS ?? 2);
const SETTLE_MS = Number(process.env.BENCH_DENSITY_SETTLE_S ?? 60) * 1000;
const EXERCISE = Number(process.env.BENCH_DENSITY_EXERCISE ?? 8);
const FORK = process.env.BENCH_DENSITY_FORK !== "0";
const FORK_COUNT = Number(process.env.BENCH_DENSITY_FORK_COUNT ?? 16);
const REQUEST_TIMEOUT_MS = 300_000;

const since = (t: number) => performance.now() - t;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const rows: Summary[] = [];
const extra: Record<string, unknown> = {};

function memAvailableMiB(): number {
  const kib = /^MemAvailable:\s+(\d+)/m.exec(readFileSync("/proc/meminfo", "utf8"))?.[1];
  return Math.round(Number(kib) / 1024);
}

/** Creates sandboxes, CREATORS at a time, until TARGET are held or the server refuses one. */
async function fill(): Promise<Sandbox[]> {
  const held: Sandbox[] = [];
  const creates: number[] = [];
  let refused: string | undefined;
  let inFlight = 0;
  const start = performance.now();
  const creator = async () => {
    while (held.length + inFlight < TARGET && !refused) {
      inFlight++;
      const t = performance.now();
      try {
        held.push(
          await Sandbox.create({ timeoutMs: 3_600_000, requestTimeoutMs: REQUEST_TIMEOUT_MS }),
        );
        creates.push(since(t));
        if (held.length % 50 === 0)
          console.log(`${held.length} held, ${memAvailableMiB()} MiB free`);
      } catch (err) {
        refused ??= `after ${held.length}: ${String(err).slice(0, 300)}`;
      } finally {
        inFlight--;
      }
    }
  };
  await Promise.all(Array.from({ length: CREATORS }, creator));
  rows.push(summarize(`create while filling to ${TARGET}`, "ms", creates));
  Object.assign(extra, { held: held.length, fillS: Math.round(since(start) / 1000), refused });
  return held;
}

/** PSS (p50, p90, by kind) and CPU of every VMM of the server, over a 10 s window. */
async function measureIdle(server: TestServer): Promise<void> {
  const runDir = join(server.dataDir, "run");
  const before = vmmProcesses(runDir);
  await sleep(10_000);
  const after = vmmProcesses(runDir);
  const cpuPct = after.flatMap((p) => {
    const b = before.find((q) => q.pid === p.pid);
    return b ? [((p.ticks - b.ticks) / 100 / 10) * 100] : [];
  });
  rows.push(
    summarize(
      `idle PSS per VMM (${after.length} VMMs)`,
      "MiB",
      after.map((p) => p.pssKiB / 1024),
    ),
  );
  rows.push(summarize("idle CPU per VMM", "% core", cpuPct));
  idleTicksPerS = (totalTicks(after) - totalTicks(before)) / 10;
  extra.pssByKindMedianMiB = medianBreakdownMiB(after.map((p) => pssBreakdown(p.pid)));
  extra.memAvailableHeldMiB = memAvailableMiB();
  const sample = after.at(-1);
  if (sample) extra.sampleVmmTopMappings = topMappings(sample.pid);
  extra.loadavg = readFileSync("/proc/loadavg", "utf8").trim();
}

let idleTicksPerS = 0;
const totalTicks = (vmms: readonly { ticks: number }[]) =>
  vmms.reduce((sum, p) => sum + p.ticks, 0);

/**
 * A command in every held sandbox, EXERCISE at a time: how many answer, and how fast. Also
 * the VMMs' CPU per command beyond their idle rate (less sensitive to a busy host than wall
 * time: what TCG spent translating and running the command's path).
 */
async function exercise(server: TestServer, held: readonly Sandbox[]): Promise<void> {
  const runDir = join(server.dataDir, "run");
  const ticksBefore = totalTicks(vmmProcesses(runDir));
  const answers: number[] = [];
  const seconds: number[] = [];
  const failures = new Set<string>();
  const start = performance.now();
  let next = 0;
  const worker = async () => {
    while (next < held.length) {
      const sandbox = held[next++] as Sandbox;
      const t = performance.now();
      try {
        const r = await sandbox.commands.run("echo ok", {
          requestTimeoutMs: REQUEST_TIMEOUT_MS,
          timeoutMs: REQUEST_TIMEOUT_MS,
        });
        if (r.stdout.trim() !== "ok") throw new Error(`unexpected output ${r.stdout}`);
        answers.push(since(t));
        // The same again: what a command costs once the VM is warm (a small TCG code cache
        // retranslates on every command, not only on the first after idle).
        const again = performance.now();
        await sandbox.commands.run("echo ok", { requestTimeoutMs: REQUEST_TIMEOUT_MS });
        seconds.push(since(again));
      } catch (err) {
        failures.add(String(err).slice(0, 200));
      }
    }
  };
  await Promise.all(Array.from({ length: EXERCISE }, worker));
  rows.push(summarize(`first command after idle, ${EXERCISE} at a time`, "ms", answers));
  rows.push(summarize("second command", "ms", seconds));
  const busyTicks =
    totalTicks(vmmProcesses(runDir)) - ticksBefore - (idleTicksPerS * since(start)) / 1000;
  // Two commands per sandbox.
  extra.vmmCpuMsPerCommand = Math.round((busyTicks * 10) / Math.max(answers.length * 2, 1));
  Object.assign(extra, {
    answered: answers.length,
    exerciseS: Math.round(since(start) / 1000),
    failures: [...failures],
  });
}

// A pip-style install: pip's own package (a few MB of Python) copied into the user's
// site-packages under another name, byte-compiled and imported, as `pip install` leaves it.
const INSTALL = `set -e
site=$(python3 -m site --user-site); mkdir -p "$site"
cp -r /usr/lib/python3/dist-packages/pip "$site/warren_pkg"
python3 -m compileall -q "$site/warren_pkg" >/dev/null
python3 -c 'import warren_pkg, warren_pkg._internal.cli.main'
du -sk "$site" | cut -f1`;

/** Fork ×FORK_COUNT (default 16) after the parent's install: each child's PSS once all answered and settled. */
async function forkAfterWorkload(server: TestServer): Promise<void> {
  const runDir = join(server.dataDir, "run");
  const parent = await Sandbox.create({ timeoutMs: 600_000 });
  const installed = await parent.commands.run(INSTALL, { timeoutMs: REQUEST_TIMEOUT_MS });
  extra.forkParentInstalledKiB = Number(installed.stdout.trim());
  const existing = new Set(vmmProcesses(runDir).map((p) => p.pid));
  const t = performance.now();
  const children = (await parent.fork({ count: FORK_COUNT })).filter(
    (r): r is Sandbox => r instanceof Sandbox,
  );
  // T=0: restored and /init done, nothing run yet.
  const atFork = vmmProcesses(runDir).filter((p) => !existing.has(p.pid));
  extra.forkChildPssAtForkMedianMiB = medianBreakdownMiB(atFork.map((p) => pssBreakdown(p.pid)));
  await Promise.all(children.map((c) => c.commands.run("python3 -c 'import warren_pkg'")));
  extra.forkAllAnsweringMs = Math.round(since(t));
  await sleep(SETTLE_MS / 2);
  const kids = vmmProcesses(runDir).filter((p) => !existing.has(p.pid));
  rows.push(
    summarize(
      `fork child PSS after install (${kids.length})`,
      "MiB",
      kids.map((p) => p.pssKiB / 1024),
    ),
  );
  extra.forkChildPssByKindMedianMiB = medianBreakdownMiB(kids.map((p) => pssBreakdown(p.pid)));
  await Promise.all([parent, ...children].map((s) => s.kill()));
}

/** Kills every held sandbox; the server then stops and no QEMU or named resource may remain. */
async function teardown(server: TestServer, held: readonly Sandbox[]): Promise<void> {
  const t = performance.now();
  const kills = await Promise.allSettled(held.map((s) => s.kill()));
  extra.killFailures = kills.filter((k) => k.status === "rejected").length;
  extra.killAllMs = Math.round(since(t));
  await server.stop();
  const left = await qemuPidsIn(server.dataDir);
  extra.leftAfterStop = { qemus: left.length, named: await leakCheck() };
}

extra.memAvailableStartMiB = memAvailableMiB();
/** Server settings for a lever under test: BENCH_DENSITY_SERVER_ENV="WARREN_X=1,WARREN_Y=2". */
function leverSettings(): Record<string, string> {
  const pairs = (process.env.BENCH_DENSITY_SERVER_ENV ?? "").split(",").filter(Boolean);
  return Object.fromEntries(
    pairs.map((p) => [p.slice(0, p.indexOf("=")), p.slice(p.indexOf("=") + 1)]),
  );
}

extra.serverSettings = leverSettings();
const server = await startServer({ WARREN_LOG_LEVEL: "info", ...leverSettings() });
let held: Sandbox[] = [];
try {
  held = await fill();
  await sleep(SETTLE_MS);
  await measureIdle(server);
  // Printed now too: on a node held at its limit the exercise can take long.
  console.log(`idle: ${JSON.stringify({ rows, ...extra })}`);
  await exercise(server, held);
  await Promise.allSettled(held.map((s) => s.kill()));
  held = [];
  if (FORK) await forkAfterWorkload(server);
} finally {
  await teardown(server, held);
}
report("density", rows, extra);
