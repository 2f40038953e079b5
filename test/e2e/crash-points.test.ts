// Crash points (src/shared/crash-point.ts): a server that dies anywhere in an operation, as
// by kill -9, leaves nothing a restart cannot account for. For each operation, a traced
// server first shows which points it passes; then for every point a server started to die
// there runs the operation, a new server starts on the same data dir, and:
// - every sandbox that existed is running, paused (and resumes with its processes) or was
//   reported lost (killed with a `lost` reason and a sandbox.lost event), never silently gone;
// - a QEMU of the dead server (the keeper holds them: its death kills none) survives the
//   restart only as the VMM of a sandbox it re-adopted, running;
// - catalog, data dir and host agree (test/helpers/consistency.ts): no stale snapshot,
//   runtime dir, QEMU, namespace, veth or rule; every snapshot row has its files and every
//   snapshot directory its row; every snapshot template still restores.
// One data dir for the whole file: the base template is built once.
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, it } from "node:test";
import { Sandbox } from "e2b";
import { SqliteCatalog } from "../../src/catalog/index.js";
import { consistencyProblems, vmmsUnder, waitConsistent } from "../helpers/consistency.js";
import {
  type CrashAt,
  crashAtValue,
  exitOf,
  exitsWithin,
  type ProcessId,
  pointsOf,
  readTrace,
  stillRunning,
  union,
  vmmProcesses,
} from "../helpers/crash-run.js";
import { runEnv } from "../helpers/run-env.js";
import { api, startServer, type TestServer, waitFor } from "../helpers/server.js";

/** What a run of an operation made, to be found after a crash. */
interface Made {
  /** Sandboxes the setup made, with the pid of the `sleep` each runs. */
  readonly sandboxes: Map<string, { sleepPid: number }>;
  /** Sandboxes killed on purpose: killed, not lost. */
  readonly killed: Set<string>;
  /** The sandbox the operation acts on. */
  target?: string;
  /** The snapshot template the operation acts on. */
  template?: string;
}

/** A run of an operation: its server, and what its setup made. */
interface Run extends Made {
  readonly server: TestServer;
  /** The server's trace file, and its length when the operation began. */
  readonly trace: string;
  mark: number;
}

interface Operation {
  readonly name: string;
  /** Server settings for its runs (the restarted server has none of them). */
  readonly env?: Record<string, string>;
  /** The traced points that are the operation's (default: all it passes). */
  readonly points?: (point: string) => boolean;
  /** The server's start is the operation: it dies before it is ready. */
  readonly atStart?: boolean;
  /** Only run when WARREN_TEST_CRASH_OPS names it (slow). */
  readonly optIn?: boolean;
  setup(run: Run): Promise<void>;
  /** The operation, and whatever it leaves running in the background that must be done. */
  run(run: Run): Promise<void>;
  /**
   * Where its target must be after a crash at `at`, when more than "not silently gone" is
   * owed: paused when its pause snapshot is whole (a pause that captured, a resume that
   * did not finish).
   */
  targetAfter?(at: CrashAt): "paused" | undefined;
}

const NO_POOL = { WARREN_POOL_SIZE: "0", WARREN_POOL_MAX_PER_TEMPLATE: "0" };
/** The restarted server: nothing but its sandboxes holds a VMM or a network slot. */
const RESTART_ENV = { ...NO_POOL, WARREN_SLOT_POOL_SIZE: "0" };
const TIMEOUT_S = 600;
/** A flatten's redundant layers are released 10 s after it (Snapshots retireDelayMs). */
const FLATTEN_SETTLE_MS = 30_000;
const CRASH_WAIT_MS = 30_000;
/** How long a VMM may take to be gone once its killer acted. */
const VMM_EXIT_MS = 5_000;

const OPERATIONS: Operation[] = [
  {
    name: "create",
    // base keeps one warmed VMM: the create takes it. Its refill is pool-fill's.
    env: { WARREN_POOL_SIZE: "1" },
    points: (p) => !p.startsWith("warm-pool."),
    async setup(run) {
      await waitFor(
        "a warmed VMM",
        async () => (await health(run.server)).pooledVmms === 1,
        60_000,
      );
    },
    async run(run) {
      // No internet: the pooled VMM's slot gets the sandbox's own policy.
      const create = api(run.server, "POST", "/sandboxes", {
        templateID: "base",
        timeout: TIMEOUT_S,
        allow_internet_access: false,
      });
      await expectStatus(create, 201);
    },
  },
  {
    name: "pool-fill",
    // No floor: the create's demand makes the pool fill after it.
    env: { WARREN_POOL_SIZE: "0" },
    points: (p) => p.startsWith("warm-pool."),
    async setup() {},
    async run(run) {
      const create = api(run.server, "POST", "/sandboxes", {
        templateID: "base",
        timeout: TIMEOUT_S,
      });
      await expectStatus(create, 201);
      await waitFor(
        "a warmed VMM",
        async () => (await health(run.server)).pooledVmms === 1,
        60_000,
      );
    },
  },
  {
    name: "pause",
    env: NO_POOL,
    async setup(run) {
      run.target = await newSandbox(run);
    },
    async run(run) {
      await expectStatus(api(run.server, "POST", `/sandboxes/${run.target}/pause`), 204);
    },
    targetAfter: (at) =>
      at.point.startsWith("lifecycle.pause.") && at.point !== "lifecycle.pause.after-pausing"
        ? "paused"
        : undefined,
  },
  {
    name: "resume",
    env: NO_POOL,
    async setup(run) {
      run.target = await newSandbox(run);
      await expectStatus(api(run.server, "POST", `/sandboxes/${run.target}/pause`), 204);
    },
    async run(run) {
      const resume = api(run.server, "POST", `/sandboxes/${run.target}/resume`, {
        timeout: TIMEOUT_S,
      });
      await expectStatus(resume, 201);
    },
    // Until it is recorded running, the resume had not happened: its snapshot is intact.
    targetAfter: (at) => (at.point === "lifecycle.resume.after-running" ? undefined : "paused"),
  },
  {
    name: "fork",
    env: NO_POOL,
    async setup(run) {
      run.target = await newSandbox(run);
    },
    async run(run) {
      const fork = api(run.server, "POST", `/sandboxes/${run.target}/fork`, {
        count: 2,
        timeout: TIMEOUT_S,
      });
      const { body } = await expectStatus(fork, 201);
      assert.ok(
        (body as { sandbox?: unknown }[]).every((child) => child.sandbox),
        JSON.stringify(body),
      );
    },
  },
  {
    name: "snapshot",
    env: NO_POOL,
    async setup(run) {
      run.target = await newSandbox(run);
    },
    async run(run) {
      const snapshot = api(run.server, "POST", `/sandboxes/${run.target}/snapshots`, {
        name: "crash-snap",
      });
      await expectStatus(snapshot, 201);
    },
  },
  {
    name: "template-delete",
    env: NO_POOL,
    async setup(run) {
      // Its source killed, the template alone holds the capture: deleting it deletes the data.
      const source = await newSandbox(run);
      run.template = "crash-tpl";
      await expectStatus(
        api(run.server, "POST", `/sandboxes/${source}/snapshots`, { name: run.template }),
        201,
      );
      await killSandbox(run, source);
    },
    async run(run) {
      await expectStatus(api(run.server, "DELETE", `/templates/${run.template}`), 204);
    },
  },
  {
    name: "flatten",
    // Two pauses make a chain of two layers above base: the second is flattened onto base.
    env: { ...NO_POOL, WARREN_FLATTEN_DEPTH: "1" },
    points: (p) => p.startsWith("snapshots.flatten.") || p.startsWith("snapshots.release."),
    async setup(run) {
      run.target = await newSandbox(run);
      await expectStatus(api(run.server, "POST", `/sandboxes/${run.target}/pause`), 204);
      await expectStatus(
        api(run.server, "POST", `/sandboxes/${run.target}/resume`, { timeout: TIMEOUT_S }),
        201,
      );
    },
    async run(run) {
      await expectStatus(api(run.server, "POST", `/sandboxes/${run.target}/pause`), 204);
      await waitFor(
        "the flattened chain's old layer released",
        async () =>
          (await readTrace(run.trace)).slice(run.mark).includes("snapshots.release.after-delete"),
        FLATTEN_SETTLE_MS,
      );
    },
    // Flattening comes after the pause is recorded.
    targetAfter: () => "paused",
  },
  {
    name: "kill",
    env: NO_POOL,
    async setup(run) {
      // Paused: its kill also deletes its pause snapshot.
      run.target = await newSandbox(run);
      await expectStatus(api(run.server, "POST", `/sandboxes/${run.target}/pause`), 204);
      run.killed.add(run.target);
    },
    async run(run) {
      await expectStatus(api(run.server, "DELETE", `/sandboxes/${run.target}`), 204);
    },
  },
  {
    name: "base-rebuild",
    // Another shape than the restarted server's: each start finds base stale and replaces it
    // (a cold boot, ~15 s under TCG: opt-in).
    env: { ...NO_POOL, WARREN_TEMPLATE_MEMORY_MIB: "576" },
    atStart: true,
    optIn: true,
    points: (p) => p.startsWith("base-template.") || p.startsWith("snapshots."),
    async setup() {},
    async run() {},
  },
];

const traces = await mkdtemp(join(tmpdir(), "warren-crash-traces-"));
let traceCount = 0;
const exercised = new Map<string, number>();
/** Crash points after which the restart re-adopted a running sandbox of the dead server. */
const reattachedAfter: string[] = [];
const started = performance.now();

before(async () => {
  // Builds base once for the whole file (later starts find it).
  const server = await startServer(RESTART_ENV);
  assert.equal(await server.stop(), 0);
});

after(async () => {
  await rm(traces, { recursive: true, force: true });
  const minutes = ((performance.now() - started) / 60_000).toFixed(1);
  const total = [...exercised.values()].reduce((a, b) => a + b, 0);
  const per = [...exercised].map(([op, n]) => `${op} ${n}`).join(", ");
  console.log(`crash points exercised: ${total} (${per}) in ${minutes} min`);
  if (reattachedAfter.length > 0) {
    console.log(
      `a running sandbox's QEMU was re-adopted after ${reattachedAfter.length} of them: ${reattachedAfter.join(", ")}`,
    );
  }
});

/** WARREN_TEST_CRASH_OPS=pause,fork runs those operations only (while working on them). */
const only = process.env.WARREN_TEST_CRASH_OPS?.split(",");
const chosen = (op: Operation) => (only ? only.includes(op.name) : !op.optIn);

for (const op of OPERATIONS.filter(chosen)) {
  it(`${op.name}: a crash at any of its points leaves nothing a restart cannot account for`, async (t) => {
    const points = await discover(op);
    assert.ok(points.length > 0, `${op.name} passes crash points`);
    t.diagnostic(`${op.name}: ${points.map(crashAtValue).join(" ")}`);
    exercised.set(op.name, 0);
    for (const at of points) {
      await t.test(crashAtValue(at), async (st) => {
        const timer = new PhaseTimer();
        const problems = await crashAndRestart(op, at, timer);
        st.diagnostic(timer.toString());
        exercised.set(op.name, (exercised.get(op.name) ?? 0) + 1);
        assert.deepEqual(problems, [], `after a crash at ${crashAtValue(at)}`);
      });
    }
  });
}

/** How long each phase of a crash run took, for the test's diagnostics. */
class PhaseTimer {
  #last = performance.now();
  readonly #phases: string[] = [];

  mark(phase: string): void {
    const now = performance.now();
    this.#phases.push(`${phase} ${Math.round(now - this.#last)} ms`);
    this.#last = now;
  }

  toString(): string {
    return this.#phases.join(", ");
  }
}

/** Runs the operation on a traced server (which must not die) and lists the points it passed. */
async function discover(op: Operation): Promise<CrashAt[]> {
  const run = await startRun(op, {});
  await op.setup(run);
  // A start-time operation's points are all those of the start.
  run.mark = op.atStart ? 0 : (await readTrace(run.trace)).length;
  await op.run(run);
  const points = pointsOf(await readTrace(run.trace), run.mark, op.points);
  assert.deepEqual(await resetAndStop(run.server), [], `${op.name} runs and leaves nothing`);
  // A start that changed the node (base rebuilt): a plain start changes it back.
  if (op.atStart) assert.equal(await (await startServer(RESTART_ENV)).stop(), 0);
  return points;
}

/**
 * One crash: the server dies at `at` during the operation, a new one starts on its data dir;
 * returns every way what it finds falls short (see the top of the file).
 */
async function crashAndRestart(op: Operation, at: CrashAt, timer: PhaseTimer): Promise<string[]> {
  const dataDir = runEnv().dataDir;
  const killedBefore = await killedIds(dataDir);
  const crashed = await (op.atStart ? crashAtStart(op, at) : crashInOperation(op, at));
  if (Array.isArray(crashed)) return crashed;
  const { made, vmmsBefore } = crashed;
  const left = union(vmmsBefore, await vmmProcesses(dataDir));
  const problems: string[] = [];
  timer.mark("start, setup and crash");

  const restarted = await startServer(RESTART_ENV);
  timer.mark("restart");
  try {
    // What runs on is a re-adopted sandbox's VMM; the keeper's others were killed.
    const running = new Set(await idsIn(dataDir, "running"));
    const vmOf = await vmmsUnder(dataDir, join(dataDir, "run"));
    const survivors = async () =>
      (await stillRunning(left))
        .map((p) => p.pid)
        .filter((pid) => !running.has(vmOf.get(pid) ?? ""));
    await waitFor(
      "the dead server's other QEMUs gone",
      async () => (await survivors()).length === 0,
      VMM_EXIT_MS,
    ).catch(async () =>
      problems.push(`QEMU of the dead server survived the restart: ${await survivors()}`),
    );
    if ((await stillRunning(left)).length > 0) reattachedAfter.push(crashAtValue(at));
    problems.push(...(await sandboxesAccountedFor(made, restarted, killedBefore)));
    const owed = op.targetAfter?.(at);
    if (owed && made.target) {
      const state = (await idsIn(dataDir, owed)).includes(made.target) ? owed : "not";
      if (state !== owed) problems.push(`sandbox ${made.target} is not ${owed}`);
    }
    problems.push(...(await waitConsistent({ dataDir })));
    timer.mark("checks");
    problems.push(...(await pausedResume(made, restarted)));
    problems.push(...(await templatesRestore(restarted)));
    timer.mark("resumes and restores");
  } catch (err) {
    problems.push(`checking failed: ${err}`);
  }
  problems.push(...(await resetAndStop(restarted)));
  timer.mark("reset");
  return problems;
}

/** What a crashed run made, and its QEMUs seen before the crash; or why it did not crash. */
type Crashed = { made: Made; vmmsBefore: ProcessId[] } | string[];

/** Starts a server to die at `at`, sets the operation up and runs it until the server dies. */
async function crashInOperation(op: Operation, at: CrashAt): Promise<Crashed> {
  const run = await startRun(op, { WARREN_CRASH_AT: crashAtValue(at) });
  try {
    await op.setup(run);
  } catch (err) {
    // Stopped here, or it would hold the run's keeper and fail every later point too.
    await resetAndStop(run.server).catch(() => {});
    throw err;
  }
  assert.equal(run.server.process.exitCode ?? run.server.process.signalCode, null, "setup ran");
  run.mark = (await readTrace(run.trace)).length;
  const vmmsBefore = await vmmProcesses(run.server.dataDir);
  await Promise.race([op.run(run).catch(() => {}), exitOf(run.server)]);
  if (!(await exitsWithin(run.server, CRASH_WAIT_MS))) {
    return [`the server did not reach ${crashAtValue(at)}`, ...(await resetAndStop(run.server))];
  }
  assert.equal((await exitOf(run.server)).signal, "SIGKILL", "the server died at the point");
  const trace = await readTrace(run.trace);
  assert.equal(trace.at(-1), at.point, "the last point passed is the crash point");
  return { made: run, vmmsBefore };
}

/** Starts a server to die at `at` while it starts. */
async function crashAtStart(op: Operation, at: CrashAt): Promise<Crashed> {
  const trace = newTrace(op);
  const start = startRun(op, { WARREN_CRASH_AT: crashAtValue(at) }, trace);
  const outcome = await start.then(
    (run) => run,
    (err: unknown) => (err instanceof Error ? err : new Error(String(err))),
  );
  if (!(outcome instanceof Error)) {
    return [
      `the server did not reach ${crashAtValue(at)}`,
      ...(await resetAndStop(outcome.server)),
    ];
  }
  // startServer's message: "server exited (<code>) before it was ready"; a signal has none.
  assert.match(outcome.message, /exited \(null\)/, "the server died at the point");
  assert.equal(
    (await readTrace(trace)).at(-1),
    at.point,
    "the last point passed is the crash point",
  );
  return { made: { sandboxes: new Map(), killed: new Set() }, vmmsBefore: [] };
}

function newTrace(op: Operation): string {
  return join(traces, `${op.name}-${++traceCount}.trace`);
}

/** A server for one run of `op`, traced to a file of its own. */
async function startRun(
  op: Operation,
  env: Record<string, string>,
  trace = newTrace(op),
): Promise<Run> {
  const server = await startServer({ ...op.env, ...env, WARREN_CRASH_TRACE: trace });
  return { server, trace, mark: 0, sandboxes: new Map(), killed: new Set() };
}

/**
 * Every sandbox row the crash could have touched is either served in its state, or ended:
 * killed on purpose, or reported lost (reason and event). Every sandbox the setup made has
 * its row.
 */
async function sandboxesAccountedFor(
  run: Made,
  server: TestServer,
  killedBefore: Set<string>,
): Promise<string[]> {
  const problems: string[] = [];
  const catalog = await SqliteCatalog.open(join(server.dataDir, "catalog.sqlite"));
  try {
    const rows = await catalog.listSandboxes();
    for (const id of run.sandboxes.keys()) {
      if (!rows.some((row) => row.id === id)) problems.push(`sandbox ${id} is silently gone`);
    }
    for (const row of rows) {
      if (killedBefore.has(row.id)) continue;
      const { status, body } = await api(server, "GET", `/sandboxes/${row.id}`);
      const served = status === 200 ? (body as { state?: string }).state : undefined;
      if (row.state !== "killed") {
        if (served !== row.state) {
          problems.push(`sandbox ${row.id} is ${row.state} in the catalog, served: ${served}`);
        }
        continue;
      }
      if (status !== 404) problems.push(`killed sandbox ${row.id} is still served (${status})`);
      if (run.killed.has(row.id) && row.endedReason === "killed") continue;
      const events = await catalog.listEvents(row.id);
      const logged = server.logs.some((l) => l.msg === "sandbox.lost" && l.sandboxId === row.id);
      const reported = logged && events.some((event) => event.kind === "sandbox.lost");
      if (!row.endedReason?.startsWith("lost") || !reported) {
        problems.push(
          `sandbox ${row.id} ended (${row.endedReason}) without being reported lost (events: ${events.map((e) => e.kind).join(", ")})`,
        );
      }
    }
  } finally {
    await catalog.close();
  }
  return problems;
}

/** Every paused sandbox resumes, with its `sleep` still running when the setup started one. */
async function pausedResume(run: Made, server: TestServer): Promise<string[]> {
  const problems: string[] = [];
  for (const id of await idsIn(server.dataDir, "paused")) {
    try {
      const sandbox = await Sandbox.connect(id);
      const pid = run.sandboxes.get(id)?.sleepPid;
      const out = await sandbox.commands.run(pid ? `ps -o pid= -p ${pid}` : "echo alive");
      const expected = pid ? String(pid) : "alive";
      if (out.stdout.trim() !== expected) {
        problems.push(`resumed sandbox ${id} answered '${out.stdout.trim()}', not '${expected}'`);
      }
    } catch (err) {
      problems.push(`paused sandbox ${id} did not resume: ${err}`);
    }
  }
  // Now running: their VMMs, runtime dirs and slots are theirs.
  problems.push(...(await waitConsistent({ dataDir: server.dataDir })));
  return problems;
}

/** Every snapshot template still starts a sandbox that answers. */
async function templatesRestore(server: TestServer): Promise<string[]> {
  const problems: string[] = [];
  for (const template of await snapshotTemplates(server.dataDir)) {
    try {
      const sandbox = await Sandbox.create(template, { timeoutMs: TIMEOUT_S * 1000 });
      await sandbox.commands.run("true");
      await sandbox.kill();
    } catch (err) {
      problems.push(`snapshot template ${template} does not restore: ${err}`);
    }
  }
  return problems;
}

/**
 * Kills every sandbox and deletes every snapshot template, then stops the server; returns
 * what went wrong, and what the stopped server left (it must leave nothing).
 */
async function resetAndStop(server: TestServer): Promise<string[]> {
  const { dataDir } = server;
  const problems: string[] = [];
  const expect = async (what: string, response: ReturnType<typeof api>, status: number) => {
    const res = await response.catch((err: unknown) => ({ status: 0, body: String(err) }));
    if (res.status !== status) problems.push(`${what}: ${res.status} ${JSON.stringify(res.body)}`);
  };
  for (const id of await idsIn(dataDir, "running", "paused")) {
    await expect(`kill ${id}`, api(server, "DELETE", `/sandboxes/${id}`), 204);
  }
  for (const template of await snapshotTemplates(dataDir)) {
    await expect(`delete ${template}`, api(server, "DELETE", `/templates/${template}`), 204);
  }
  const code = await server.stop();
  if (code !== 0) problems.push(`the server exited with ${code}`);
  problems.push(...(await consistencyProblems({ dataDir })).map((p) => `after the stop: ${p}`));
  return problems;
}

/** A running sandbox with `sleep` in the background; its id. */
async function newSandbox(run: Run): Promise<string> {
  const sandbox = await Sandbox.create({ timeoutMs: TIMEOUT_S * 1000 });
  const sleep = await sandbox.commands.run("sleep 3600", { background: true, timeoutMs: 0 });
  // No stream left open to a server about to die.
  await sleep.disconnect();
  run.sandboxes.set(sandbox.sandboxId, { sleepPid: sleep.pid });
  return sandbox.sandboxId;
}

async function killSandbox(run: Run, id: string): Promise<void> {
  run.killed.add(id);
  await expectStatus(api(run.server, "DELETE", `/sandboxes/${id}`), 204);
}

async function expectStatus(
  response: ReturnType<typeof api>,
  status: number,
): Promise<Awaited<ReturnType<typeof api>>> {
  const res = await response;
  assert.equal(res.status, status, JSON.stringify(res.body));
  return res;
}

async function health(server: TestServer): Promise<{ pooledVmms?: number }> {
  const res = await fetch(`${server.url}/health`, {
    headers: { "x-admin-token": server.adminToken },
  });
  return (await res.json()) as { pooledVmms?: number };
}

async function withCatalog<T>(dataDir: string, read: (c: SqliteCatalog) => Promise<T>): Promise<T> {
  const catalog = await SqliteCatalog.open(join(dataDir, "catalog.sqlite"));
  try {
    return await read(catalog);
  } finally {
    await catalog.close();
  }
}

function idsIn(dataDir: string, ...states: ("running" | "paused")[]): Promise<string[]> {
  return withCatalog(dataDir, async (c) => (await c.listSandboxes(states)).map((row) => row.id));
}

function killedIds(dataDir: string): Promise<Set<string>> {
  return withCatalog(
    dataDir,
    async (c) => new Set((await c.listSandboxes(["killed"])).map((row) => row.id)),
  );
}

function snapshotTemplates(dataDir: string): Promise<string[]> {
  return withCatalog(dataDir, async (c) =>
    (await c.listTemplates()).filter((t) => t.kind === "snapshot").map((t) => t.id),
  );
}
