// The node server measured through its API with the real e2b SDK, in one run: create
// (sequential, 8 and 32 concurrent clients), pause, resume, snapshot (idle, 50 MB dirtied,
// under continuous disk writes), fork ×1/×4/×16, density of idle sandboxes (again with KSM on,
// unless BENCH_KSM=0), then the naive baselines on the same machine: a cold boot, and QEMU's
// own full-memory migration to a file.
// First, the targets probe (bench/lib/api-probe.ts) with each API operation's time split,
// then the same probe through a server whose VMs run uncontained, for containment's cost as
// a ratio measured in this run. BENCH_ONLY=targets stops after that; BENCH_QUICK=1 runs a
// few of each.
// Run: npm run bench:warren (as root; the server is started and stopped by the bench).
import {
  chmodSync,
  createWriteStream,
  existsSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { NetnsSlotPool } from "../src/network/index.js";
import type { QemuVm } from "../src/vmm/qemu/vm.js";
import { envdUrl, slotVmSpec, testVmm, waitForEnvd } from "../test/helpers/guest.js";
import { runPoolOptions } from "../test/helpers/run-env.js";
import { startServer, type TestServer } from "../test/helpers/server.js";
import { DEFAULT_PROBE, probe, QUICK_PROBE, splitRows } from "./lib/api-probe.js";
import { poolRefilled } from "./lib/pool.js";
import { report, type Summary, summarize } from "./lib/report.js";
import { vmmProcesses } from "./lib/vmm-processes.js";

const N = Number(process.env.BENCH_CREATES ?? 10);
const DENSITY = Number(process.env.BENCH_DENSITY ?? 150);
const CHAIN = Number(process.env.BENCH_CHAIN ?? 100);
const rows: Summary[] = [];
const extra: Record<string, unknown> = {};

const since = (t: number) => performance.now() - t;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Server-side timings of captures, from its log (`sandbox.captured` / `sandbox.paused`). */
function capturesSince(server: TestServer, from: number, msg: string): number[] {
  return server.logs
    .slice(from)
    .filter((l) => l.msg === msg)
    .map((l) => Number(l.pausedMs));
}

// Under 32 concurrent creates on 2 cores the last ones answer after more than the SDK's
// default 60 s request timeout: give them longer, and report what still fails.
const REQUEST_TIMEOUT_MS = 300_000;
process.on("unhandledRejection", (err) => console.error("unhandled (SDK):", err));
process.on("uncaughtException", (err) => console.error("uncaught (SDK):", err));

async function createUntilCommand(): Promise<[Sandbox, number]> {
  const t = performance.now();
  const sandbox = await Sandbox.create({ requestTimeoutMs: REQUEST_TIMEOUT_MS });
  await sandbox.commands.run("true", { timeoutMs: REQUEST_TIMEOUT_MS });
  return [sandbox, since(t)];
}

async function concurrentCreates(clients: number): Promise<void> {
  const t = performance.now();
  const results = await Promise.all(Array.from({ length: clients }, () => createUntilCommand()));
  const wallMs = since(t);
  rows.push(
    summarize(
      `create → command, ${clients} concurrent clients`,
      "ms",
      results.map((r) => r[1]),
    ),
  );
  extra[`throughput_${clients}_per_s`] = Math.round((clients / wallMs) * 1000 * 100) / 100;
  await Promise.all(results.map(([s]) => s.kill()));
}

/**
 * Holds DENSITY idle sandboxes: their creates, then (after they settle) PSS and CPU of each
 * VMM, ksmd's CPU, and a command in each. Rows are named with `label`.
 */
async function measureDensity(server: TestServer, label: string): Promise<Record<string, unknown>> {
  const result: Record<string, unknown> = {};
  const availableBefore = memAvailableMiB();
  const idle: Sandbox[] = [];
  const creates: number[] = [];
  const densityStart = performance.now();
  for (let i = 0; i < DENSITY; i++) {
    const t = performance.now();
    try {
      idle.push(
        await Sandbox.create({ timeoutMs: 3_600_000, requestTimeoutMs: REQUEST_TIMEOUT_MS }),
      );
    } catch (err) {
      result.createError = `after ${idle.length}: ${String(err)}`;
      break;
    }
    creates.push(since(t));
  }
  result.fillMs = Math.round(since(densityStart));
  rows.push(summarize(`density: create while ${DENSITY} are held${label}`, "ms", creates));
  // Guests settle: envd's GC and the kernel's deferred work run in the first minute after a
  // restore (measured: ~4 % of a core per VM at 20-30 s, under 1 % after 60 s).
  await sleep(60_000);
  // ksmd merges a page once it has seen it unchanged in two passes over every VMM (~9 GiB
  // for 150): wait until merging levels off.
  result.ksmWaitS = await ksmSettled();
  result.ksmSharingMiB = Math.round((ksmCounter("pages_sharing") * 4) / 1024);
  const runDir = join(server.dataDir, "run");
  const before = vmmProcesses(runDir);
  const ksmdBefore = ksmdTicks();
  await sleep(10_000);
  const after = vmmProcesses(runDir);
  const ksmdAfter = ksmdTicks();
  const hz = 100;
  const cpuPct = after.map((p) => {
    const b = before.find((q) => q.pid === p.pid);
    return b ? ((p.ticks - b.ticks) / hz / 10) * 100 : Number.NaN;
  });
  const availableAfter = memAvailableMiB();
  // Still alive: every held sandbox answers a command (8 at a time).
  const answers: number[] = [];
  const failures = new Set<string>();
  for (let i = 0; i < idle.length; i += 8) {
    await Promise.all(
      idle.slice(i, i + 8).map(async (s) => {
        const t = performance.now();
        try {
          await s.commands.run("true", {
            requestTimeoutMs: REQUEST_TIMEOUT_MS,
            timeoutMs: REQUEST_TIMEOUT_MS,
          });
          answers.push(since(t));
        } catch (err) {
          failures.add(String(err).slice(0, 200));
        }
      }),
    );
  }
  rows.push(summarize(`density: command in each of ${idle.length} held${label}`, "ms", answers));
  rows.push(
    summarize(
      `idle sandbox PSS (QEMU)${label}`,
      "MiB",
      after.map((p) => p.pssKiB / 1024),
    ),
  );
  rows.push(summarize(`idle sandbox CPU (QEMU)${label}`, "% core", cpuPct.filter(Number.isFinite)));
  const pssMiB = after.reduce((sum, p) => sum + p.pssKiB, 0) / 1024 / Math.max(after.length, 1);
  Object.assign(result, {
    held: idle.length,
    answered: answers.length,
    failed: idle.length - answers.length,
    failures: [...failures],
    vmmProcesses: after.length,
    meanPssMiB: Math.round(pssMiB),
    // What the host really gave up per VMM (page cache of shared images included).
    hostMiBPerVmm: Math.round((availableBefore - availableAfter) / Math.max(after.length, 1)),
    ksmdCpuPct:
      ksmdBefore === undefined || ksmdAfter === undefined
        ? undefined
        : ((ksmdAfter - ksmdBefore) / hz / 10) * 100,
    memAvailableMiB: Math.round(availableAfter),
    moreThatFitByMemory: Math.floor(availableAfter / pssMiB),
  });
  await Promise.all(idle.map((s) => s.kill()));
  return result;
}

const KSM_DIR = "/sys/kernel/mm/ksm";

function ksmCounter(name: string): number {
  try {
    return Number(readFileSync(join(KSM_DIR, name), "utf8"));
  } catch {
    return 0;
  }
}

/** Seconds until KSM's merged pages grow by under 2 % in 20 s (at most 5 min); 0 if KSM is off. */
async function ksmSettled(): Promise<number> {
  if (ksmCounter("run") !== 1) return 0;
  const start = performance.now();
  let last = ksmCounter("pages_sharing");
  while (since(start) < 300_000) {
    await sleep(20_000);
    const now = ksmCounter("pages_sharing");
    if (now - last < now * 0.02) break;
    last = now;
  }
  return Math.round(since(start) / 1000);
}

function memAvailableMiB(): number {
  return Number(/^MemAvailable:\s+(\d+)/m.exec(readFileSync("/proc/meminfo", "utf8"))?.[1]) / 1024;
}

/** CPU ticks of the kernel's KSM thread, if there is one. */
function ksmdTicks(): number | undefined {
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, "utf8").trim() !== "ksmd") continue;
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
      return Number(stat[11]) + Number(stat[12]);
    } catch {
      // The process ended while we looked.
    }
  }
  return undefined;
}

// Named, not read from /health at start: the pool fills in the background after the server
// is ready (at low priority), so an early reading can be short. A fixed pool (no sizing from
// demand), so that "pool refilled" and "pool empty" mean what they say and figures compare
// with earlier runs.
const poolSize = 2;
const fixedPool = { WARREN_POOL_SIZE: String(poolSize), WARREN_POOL_MAX_PER_TEMPLATE: "0" };
// Pauses keep their VMMs as they do by default (the tests' servers turn that off).
const PAUSE_KEEP_MS = "30000";
// ---- targets: contained, then uncontained (benchmark-only entry point) -----------------
{
  const counts = process.env.BENCH_QUICK === "1" ? QUICK_PROBE : DEFAULT_PROBE;
  const settings = { WARREN_LOG_LEVEL: "info", ...fixedPool, WARREN_PAUSE_KEEP_MS: PAUSE_KEEP_MS };
  const contained = await startServer(settings);
  const on = await probe(contained, "", counts, { poolSize }).finally(() => contained.stop());
  const bare = await startServer(settings, {
    entry: [process.execPath, "--import", "tsx", "bench/lib/uncontained-server.ts"],
  });
  const off = await probe(bare, " (containment off)", counts, { poolSize }).finally(() =>
    bare.stop(),
  );
  // Every resume a restore: what a resume costs once its kept VMM is gone.
  const notKept = await startServer({ ...settings, WARREN_PAUSE_KEEP_MS: "0" });
  const restores = await probe(notKept, " (no VMM kept: restores)", counts, {
    poolSize,
    resumesOnly: true,
  }).finally(() => notKept.stop());
  rows.push(...on.rows, ...splitRows(on, ""), ...off.rows, ...restores.rows);
  rows.push(...splitRows(restores, " (no VMM kept: restores)"));
  extra.split = on.split;
  extra.phases = on.phases;
  extra.splitContainmentOff = off.split;
  // Containment's cost per measure: p50 with it over p50 without, in this run.
  extra.containmentCost = Object.fromEntries(
    on.rows.map((r, i) => [
      r.name,
      Math.round((r.p50 / (off.rows[i]?.p50 ?? Number.NaN)) * 100) / 100,
    ]),
  );
}
if (process.env.BENCH_ONLY === "targets") {
  report("warren", rows, extra);
  process.exit(0);
}

const server = await startServer({ WARREN_LOG_LEVEL: "info", ...fixedPool });
try {
  // ---- create ------------------------------------------------------------------------
  const sequential: number[] = [];
  for (let i = 0; i < N; i++) {
    await poolRefilled(server, poolSize);
    const [sandbox, ms] = await createUntilCommand();
    sequential.push(ms);
    await sandbox.kill();
  }
  rows.push(summarize("create → command, sequential (pool refilled)", "ms", sequential));
  const unpooled: number[] = [];
  for (let i = 0; i < Math.min(N, 5); i++) {
    // Drain the pool first: these creates restore anew.
    const held = await Promise.all(Array.from({ length: poolSize }, () => Sandbox.create()));
    const [sandbox, ms] = await createUntilCommand();
    unpooled.push(ms);
    await Promise.all([sandbox, ...held].map((s) => s.kill()));
  }
  rows.push(summarize("create → command, sequential (pool empty)", "ms", unpooled));
  await poolRefilled(server, poolSize);
  await concurrentCreates(8);
  await poolRefilled(server, poolSize);
  await concurrentCreates(32);

  // ---- pause / resume / snapshot -------------------------------------------------------
  const sandbox = await Sandbox.create({ timeoutMs: 3_600_000 });
  const pauses: number[] = [];
  const resumes: number[] = [];
  const mark = server.logs.length;
  for (let i = 0; i < 5; i++) {
    let t = performance.now();
    await sandbox.pause();
    pauses.push(since(t));
    t = performance.now();
    await sandbox.connect();
    await sandbox.commands.run("true");
    resumes.push(since(t));
  }
  rows.push(summarize("pause (API call)", "ms", pauses));
  rows.push(
    summarize("pause: VM stopped (server)", "ms", capturesSince(server, mark, "sandbox.paused")),
  );
  rows.push(summarize("resume → command", "ms", resumes));

  const snapshotIds: string[] = [];
  const snapshotRound = async (label: string) => {
    const from = server.logs.length;
    const api: number[] = [];
    for (let i = 0; i < 3; i++) {
      const t = performance.now();
      snapshotIds.push((await sandbox.createSnapshot()).snapshotId);
      api.push(since(t));
    }
    rows.push(summarize(`snapshot, ${label} (API call)`, "ms", api));
    rows.push(
      summarize(
        `snapshot, ${label}: source stopped`,
        "ms",
        capturesSince(server, from, "sandbox.captured"),
      ),
    );
  };
  await snapshotRound("idle");
  await sandbox.commands.run("head -c 50M /dev/urandom > /dev/shm/dirty");
  await snapshotRound("50 MB dirtied");
  await sandbox.commands.run(
    "while true; do dd if=/dev/zero of=/home/user/w bs=1M count=8 conv=fsync 2>/dev/null; done",
    { background: true, timeoutMs: 0 },
  );
  await sleep(1_000);
  await snapshotRound("continuous disk writes");
  await sandbox.kill();
  // Persistent snapshots would outlive the bench (disk and memory images); newest first, as
  // each stands on the one before.
  for (const id of snapshotIds.reverse()) await Sandbox.deleteSnapshot(id);

  // ---- fork --------------------------------------------------------------------------
  for (const count of [1, 4, 16]) {
    const source = await Sandbox.create({ timeoutMs: 600_000 });
    await source.commands.run("head -c 20M /dev/urandom > /dev/shm/state");
    const from = server.logs.length;
    const t = performance.now();
    const results = await source.fork({ count });
    const apiMs = since(t);
    const children = results.filter((r): r is Sandbox => r instanceof Sandbox);
    await Promise.all(children.map((c) => c.commands.run("true")));
    const allAnswerMs = since(t);
    const paused = capturesSince(server, from, "sandbox.captured")[0] ?? Number.NaN;
    rows.push(summarize(`fork ×${count}: source stopped`, "ms", [paused]));
    rows.push(summarize(`fork ×${count}: API call`, "ms", [apiMs]));
    rows.push(summarize(`fork ×${count}: every child answered`, "ms", [allAnswerMs]));
    extra[`fork_${count}_failed`] = results.length - children.length;
    await Promise.all([source, ...children].map((s) => s.kill()));
  }

  // ---- a chain of generations (alternating fork and pause/resume) ----------------------
  {
    let current = await Sandbox.create({ timeoutMs: 3_600_000 });
    // 16 MiB written at generation 0, read back (O_DIRECT: past the guest's page cache).
    await current.commands.run("dd if=/dev/urandom of=/home/user/gen0 bs=1M count=16 2>/dev/null");
    const readGen0 = async () => {
      const t = performance.now();
      await current.commands.run(
        "dd if=/home/user/gen0 of=/dev/null bs=1M iflag=direct 2>/dev/null",
      );
      return since(t);
    };
    const steps: number[] = [];
    const firstReads: number[] = [];
    const lastReads: number[] = [];
    for (let generation = 1; generation <= CHAIN; generation++) {
      await current.commands.run(`echo ${generation} > /home/user/gen-${generation}`);
      const t = performance.now();
      if (generation % 2 === 0) {
        await current.pause();
        await current.connect();
      } else {
        const [child] = await current.fork({ count: 1 });
        if (!(child instanceof Sandbox)) throw child;
        await current.kill();
        current = child;
      }
      await current.commands.run("true");
      steps.push(since(t));
      if (generation <= 5) firstReads.push(await readGen0());
      if (generation > CHAIN - 5) lastReads.push(await readGen0());
    }
    const flattens = server.logs.filter((l) => l.msg === "snapshot.flattened");
    rows.push(summarize(`chain: generation step, 1–10`, "ms", steps.slice(0, 10)));
    rows.push(summarize(`chain: generation step, ${CHAIN - 9}–${CHAIN}`, "ms", steps.slice(-10)));
    rows.push(summarize("chain: read 16 MiB from gen 0, at gen 1–5", "ms", firstReads));
    rows.push(
      summarize(`chain: read 16 MiB from gen 0, at gen ${CHAIN - 4}–${CHAIN}`, "ms", lastReads),
    );
    rows.push(
      summarize(
        "chain: background flatten",
        "ms",
        flattens.map((l) => Number(l.durationMs)),
      ),
    );
    extra.chain = { generations: CHAIN, flattens: flattens.length };
    await current.kill();
  }

  extra.density = await measureDensity(server, "");
} finally {
  await server.stop();
}

// ---- density with KSM (a server of its own: the setting applies when a VMM starts) -------
const KSM_RUN = join(KSM_DIR, "run");
if (process.env.BENCH_KSM !== "0" && existsSync(KSM_RUN)) {
  const ksmWas = readFileSync(KSM_RUN, "utf8").trim();
  const ksmServer = await startServer({
    WARREN_LOG_LEVEL: "info",
    ...fixedPool,
    WARREN_KSM: "on",
  });
  try {
    extra.densityKsm = await measureDensity(ksmServer, " (KSM on)");
  } finally {
    await ksmServer.stop();
    writeFileSync(KSM_RUN, ksmWas);
  }
}

// ---- baselines (the server is stopped: its slots and these would share names) ---------
try {
  const { images, driver, work } = await testVmm("bench-warren");
  const slots = new NetnsSlotPool({ ...runPoolOptions(), size: 1 });
  await slots.start();
  try {
    const slot = await slots.acquire();
    const spec = slotVmSpec("baseline", slot, images, work, { vcpus: 1, memoryMiB: 512 });
    const t = performance.now();
    const vm = (await driver.boot(spec)) as QemuVm;
    await waitForEnvd(envdUrl(slot.hostAddress), 180_000, vm, 2);
    rows.push(summarize("baseline: cold boot → envd ready", "ms", [since(t)]));
    // QEMU runs under seccomp with spawn=deny, so no `exec:` migration: it streams to a unix
    // socket we listen on, and we write the file.
    const file = join(work, "full-migration.bin");
    const socketPath = join(work, "migrate.sock");
    const received = new Promise<void>((resolve, reject) => {
      const listener = createServer((conn) => {
        const out = createWriteStream(file);
        conn.pipe(out);
        out.on("finish", () => {
          listener.close();
          resolve();
        });
        conn.on("error", reject);
      });
      listener.listen(socketPath, () => chmodSync(socketPath, 0o777));
    });
    await sleep(50);
    const m = performance.now();
    await vm.qmp.execute("stop");
    await vm.qmp.execute("migrate", { uri: `unix:${socketPath}` });
    await received;
    rows.push(summarize("baseline: QEMU full migration to a file", "ms", [since(m)]));
    extra.fullMigrationMiB = Math.round(statSync(file).size / 2 ** 20);
    await vm.destroy();
    await slots.release(slot);
  } finally {
    await slots.close();
    rmSync(work, { recursive: true, force: true });
  }
} catch (err) {
  extra.baselineError = String(err);
}

const p50 = (name: string) => rows.find((r) => r.name === name)?.p50 ?? Number.NaN;
const cold = p50("baseline: cold boot → envd ready");
extra.ratios = {
  createOverColdBoot:
    Math.round((p50("create → command, sequential (pool refilled)") / cold) * 1000) / 1000,
  pauseOverFullMigration:
    Math.round(
      (p50("pause: VM stopped (server)") / p50("baseline: QEMU full migration to a file")) * 1000,
    ) / 1000,
};
report("warren", rows, extra);
