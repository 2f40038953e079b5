// What RL trainers run, through the real SDKs against one server with the code interpreter,
// then the same workloads through a peer on the same machine in the same run: Docker with
// gVisor's runsc (bench/lib/peer-gvisor.ts), with Warren/peer ratios.
// 1. create → first `runCode` on code-interpreter-v1 against create → first command on base
//    (the 1.5× target), each split into the create and the first call; then new
//    python contexts on a running sandbox (createCodeContext → first run);
// 2. code-execution rewards: 16 and 64 concurrent clients, a fresh sandbox per sample or one
//    per client reused; runs/s, latency, errors;
// 3. a GRPO group: set up once, fork ×16, each child edits and tests; against 16 creates
//    each redoing the setup;
// 4. a multi-turn rollout: 50 turns in a template built from a Dockerfile, a snapshot at turn
//    25, 4 branches finishing from it.
// Warren's API operations are split (api, orchestrator, network, jail, vmm, guest) from the
// server's `api.request` lines.
// Run: npm run bench:rl (as root; the server and the peer's dockerd are started and stopped
// by the bench). BENCH_QUICK=1: a few of each. BENCH_FIRST_RUNS (default 8) creates of each
// in 1. BENCH_ONLY=first stops after 1; BENCH_PEER=0 leaves the peer out.
import { join } from "node:path";
import { Sandbox as CodeSandbox } from "@e2b/code-interpreter";
import { Sandbox } from "e2b";
import { runEnv } from "../test/helpers/run-env.js";
import { startServer, type TestServer } from "../test/helpers/server.js";
import { apiSplit } from "./lib/api-probe.js";
import { startGvisorPeer } from "./lib/peer-gvisor.js";
import { pooled } from "./lib/pool.js";
import { report, type Summary, summarize } from "./lib/report.js";
import { peerBackend } from "./lib/rl-peer.js";
import { warrenBackend } from "./lib/rl-warren.js";
import {
  type Backend,
  grpoGroup,
  multiTurnRollout,
  type RewardRun,
  rewardWorkload,
} from "./lib/rl-workloads.js";

const QUICK = process.env.BENCH_QUICK === "1";
const FIRST_ONLY = process.env.BENCH_ONLY === "first";
const FIRST_RUNS = Number(process.env.BENCH_FIRST_RUNS ?? (QUICK ? 3 : 8));
/** Concurrent clients of the reward workload, and samples per client. */
const REWARD_CLIENTS = QUICK ? [4, 8] : [16, 64];
const samplesPerClient = (clients: number) => Math.max(2, (QUICK ? 16 : 128) / clients);
const GROUP_SIZE = QUICK ? 4 : 16;
const TURNS = QUICK ? 12 : 50;
const SNAPSHOT_AT = QUICK ? 6 : 25;
const BRANCHES = QUICK ? 2 : 4;
/** The template's capture: a cold boot of its rootfs, kernels started, under TCG. */
const CAPTURE_MS = 900_000;

const rows: Summary[] = [];
const extra: Record<string, unknown> = {};
const since = (t: number) => performance.now() - t;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function codeInterpreterReady(server: TestServer): Promise<void> {
  const deadline = Date.now() + CAPTURE_MS;
  while (Date.now() < deadline) {
    const failed = server.logs.find((l) => l.msg === "code_interpreter.capture_failed");
    if (failed) throw new Error(`code-interpreter-v1's capture failed: ${JSON.stringify(failed)}`);
    if (server.logs.some((l) => l.msg === "code_interpreter.ready")) return;
    await sleep(500);
  }
  throw new Error("code-interpreter-v1 was not captured in time");
}

/** Waits until the warm pool has stopped changing (refills after the last create are done). */
async function poolSettled(server: TestServer): Promise<void> {
  let last = -1;
  for (let still = 0, i = 0; still < 3 && i < 600; i++) {
    const now = await pooled(server);
    still = now === last ? still + 1 : 0;
    last = now;
    await sleep(500);
  }
}

interface FirstCall {
  readonly createMs: number;
  readonly firstMs: number;
}

/** Create, then the first call (its answer checked), then kill: the two parts timed. */
async function firstCall<S extends { kill(): Promise<unknown> }>(
  create: () => Promise<S>,
  call: (sandbox: S) => Promise<void>,
): Promise<FirstCall> {
  const t = performance.now();
  const sandbox = await create();
  const createMs = since(t);
  await call(sandbox);
  const firstMs = since(t) - createMs;
  await sandbox.kill();
  return { createMs, firstMs };
}

const firstCommand = () =>
  firstCall(
    () => Sandbox.create(),
    async (sandbox) => {
      const run = await sandbox.commands.run("echo ready");
      if (run.stdout !== "ready\n") throw new Error(`echo answered ${JSON.stringify(run.stdout)}`);
    },
  );

const firstRunCode = () =>
  firstCall(
    () => CodeSandbox.create(),
    async (sandbox) => {
      const run = await sandbox.runCode("1 + 1");
      if (run.text !== "2") throw new Error(`1 + 1 answered ${JSON.stringify(run.text)}`);
    },
  );

async function firstRuns(server: TestServer): Promise<void> {
  const samples = { base: [] as FirstCall[], interpreter: [] as FirstCall[] };
  // Alternated, so that both see the same moments of a noisy host; one untimed of each first
  // (a template's pool fills on demand).
  for (let i = -1; i < FIRST_RUNS; i++) {
    for (const [kind, run] of [
      ["base", firstCommand],
      ["interpreter", firstRunCode],
    ] as const) {
      await poolSettled(server);
      const call = await run();
      if (i >= 0) samples[kind].push(call);
    }
  }
  const total = (c: FirstCall) => c.createMs + c.firstMs;
  for (const [kind, label] of [
    ["base", "base: create → first command"],
    ["interpreter", "code-interpreter-v1: create → first runCode"],
  ] as const) {
    rows.push(summarize(label, "ms", samples[kind].map(total)));
    rows.push(
      summarize(
        `  ${kind}: create`,
        "ms",
        samples[kind].map((c) => c.createMs),
      ),
    );
    rows.push(
      summarize(
        `  ${kind}: first call`,
        "ms",
        samples[kind].map((c) => c.firstMs),
      ),
    );
  }
  const p50 = (kind: "base" | "interpreter") => summarize("", "", samples[kind].map(total)).p50;
  const ratio = p50("interpreter") / p50("base");
  extra.firstRunCodeVsFirstCommand = { p50Ratio: Math.round(ratio * 100) / 100, target: 1.5 };
}

/** Contexts made on one running sandbox: `createCodeContext`, then its first run. */
async function newContexts(): Promise<void> {
  const sandbox = await CodeSandbox.create();
  try {
    const ms: number[] = [];
    for (let i = 0; i < FIRST_RUNS; i++) {
      const t = performance.now();
      const context = await sandbox.createCodeContext({ language: "python" });
      const run = await sandbox.runCode("1 + 1", { context });
      if (run.text !== "2") throw new Error(`1 + 1 answered ${JSON.stringify(run.text)}`);
      ms.push(since(t));
      await sandbox.removeCodeContext(context);
    }
    rows.push(summarize("code-interpreter-v1: new python context → first run", "ms", ms));
  } finally {
    await sandbox.kill();
  }
}

/** Per backend: what each workload measured, for the comparison. */
const figures: Record<string, Record<string, number>> = {};

function record(backend: string, key: string, value: number): void {
  figures[backend] ??= {};
  (figures[backend] as Record<string, number>)[key] = Math.round(value * 100) / 100;
}

/** Progress on stderr: the results come at the end. */
const progress = (line: string) => console.error(`bench:rl: ${line}`);

async function workloads(backend: Backend): Promise<void> {
  const name = backend.name;
  for (const clients of REWARD_CLIENTS) {
    for (const fresh of [true, false]) {
      const how = `reward ${clients} clients ${fresh ? "fresh" : "reused"}`;
      await section(name, how, async () => {
        const perClient = samplesPerClient(clients);
        const run: RewardRun = await rewardWorkload(backend, clients, perClient, fresh);
        const latency = summarize(`${name}: ${how}: latency`, "ms", run.latenciesMs);
        rows.push(latency);
        record(name, `${how}: runs/s`, run.samples / (run.wallMs / 1000));
        record(name, `${how}: p50 ms`, latency.p50);
        record(name, `${how}: p99 ms`, latency.p99);
        record(name, `${how}: errors`, run.errors);
        if (run.firstError) extra[`${name} ${how}: first error`] = run.firstError;
      });
    }
  }
  await section(name, `GRPO group of ${GROUP_SIZE}`, async () => {
    const group = await grpoGroup(backend, GROUP_SIZE);
    record(name, `GRPO ×${GROUP_SIZE}: setup once + fork: wall ms`, group.forkedMs);
    record(name, `GRPO ×${GROUP_SIZE}: fork alone ms`, group.forkMs);
    record(
      name,
      `GRPO ×${GROUP_SIZE}: ${GROUP_SIZE} creates + setup each: wall ms`,
      group.createdMs,
    );
    record(name, `GRPO ×${GROUP_SIZE}: reward errors`, group.errors);
  });
  await section(name, `rollout of ${TURNS} turns`, async () => {
    const rollout = await multiTurnRollout(backend, TURNS, SNAPSHOT_AT, BRANCHES);
    record(name, `rollout: ${SNAPSHOT_AT} turns, one sandbox: ms`, rollout.trunkMs);
    record(name, `rollout: snapshot at turn ${SNAPSHOT_AT}: ms`, rollout.snapshotMs);
    const branch = summarize(`${name}: rollout branch`, "ms", rollout.branchMs);
    record(name, `rollout: a branch (start + ${TURNS - SNAPSHOT_AT} turns): p50 ms`, branch.p50);
    record(name, "rollout: turns/s", rollout.turnsPerSec);
    record(name, "rollout: errors", rollout.errors);
    rows.push(branch);
  });
  record(name, "creates retried after a 429", backend.retries);
}

/** One workload: a failure is reported with the results, and the next workload still runs. */
async function section(name: string, what: string, run: () => Promise<void>): Promise<void> {
  progress(`${name}: ${what}`);
  try {
    await run();
  } catch (err) {
    extra[`${name} ${what}: failed`] = err instanceof Error ? err.message : String(err);
    progress(`${name}: ${what} failed: ${err}`);
  }
}

/** The comparison: one line per figure, Warren's, the peer's and their ratio. */
function comparison(): Record<string, unknown>[] {
  const warren = figures.warren ?? {};
  const peer = figures.gvisor ?? {};
  const lines = Object.keys(warren).map((key) => {
    const w = warren[key] as number;
    const p = peer[key];
    const ratio = p ? Math.round((w / p) * 100) / 100 : undefined;
    return { figure: key, warren: w, gvisor: p, "warren/gvisor": ratio };
  });
  const width = Math.max(...lines.map((l) => l.figure.length));
  console.log(
    `\n${"figure".padEnd(width)}  ${"warren".padStart(10)}  ${"gvisor".padStart(10)}  warren/gvisor`,
  );
  for (const l of lines)
    console.log(
      `${l.figure.padEnd(width)}  ${String(l.warren).padStart(10)}  ${String(l.gvisor ?? "-").padStart(10)}  ${l["warren/gvisor"] ?? "-"}`,
    );
  console.log("");
  return lines;
}

const server = await startServer({ WARREN_CODE_INTERPRETER: "on", WARREN_LOG_LEVEL: "info" });
try {
  progress("waiting for code-interpreter-v1's capture");
  const capture = performance.now();
  await codeInterpreterReady(server);
  extra.codeInterpreterCaptureMs = Math.round(since(capture));
  progress("create → first call");
  await firstRuns(server);
  progress("new python contexts");
  await newContexts();
  if (!FIRST_ONLY) {
    const warren = await warrenBackend();
    record("warren", "repository template build ms", warren.buildMs);
    const mark = server.logs.length;
    await workloads(warren);
    extra.warrenSplit = apiSplit(server.logs, mark).split;
  }
} finally {
  await server.stop();
}
if (!FIRST_ONLY && process.env.BENCH_PEER !== "0") {
  const peer = await startGvisorPeer({
    rootfsExt4: join(runEnv().imagesDir, "base.ext4"),
    log: (line) => console.error(line),
  });
  try {
    extra.peer = { runsc: peer.runscVersion, platform: peer.platform, ...peer.timings };
    const backend = await peerBackend(peer);
    record("gvisor", "repository template build ms", backend.buildMs);
    await workloads(backend);
  } finally {
    await peer.close();
  }
}
extra.comparison = comparison();
report("rl", rows, extra);
