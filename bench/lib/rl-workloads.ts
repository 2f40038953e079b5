// bench:rl's workloads, written once against a Backend (Warren through the SDKs, or the
// gVisor peer): code-execution rewards from many clients (a fresh sandbox per sample, or one
// per client reused), a GRPO group (setup once then fork ×16, against 16 creates that redo
// the setup), and a multi-turn rollout that snapshots at turn 25 and finishes in 4 branches.
import {
  agentTurn,
  groupEdit,
  REPO_DIR,
  RUN_TESTS,
  repoSetupScript,
  rewardSample,
} from "./rl-tasks.js";

/** One sandbox of a backend. */
export interface Box {
  readonly id: string;
  /** A shell command: its exit code and stdout. */
  sh(cmd: string): Promise<{ exitCode: number; stdout: string }>;
  /** Python code: 1 when it ran to its end, 0 when it raised. */
  python(code: string): Promise<0 | 1>;
  kill(): Promise<void>;
}

export interface Backend {
  readonly name: string;
  /** A sandbox for Python (Warren: code-interpreter-v1, whose kernel is warm). */
  createPython(): Promise<Box>;
  /** A sandbox of the image that holds the repository (built once by the backend). */
  createRepo(): Promise<Box>;
  /** `n` sandboxes continuing from `box` as it is now (its memory too, where the backend can). */
  fork(box: Box, n: number): Promise<Box[]>;
  /** Keeps `box` as it is now; `fromSnapshot` starts sandboxes from it. */
  snapshot(box: Box): Promise<string>;
  fromSnapshot(ref: string): Promise<Box>;
  /** Operations retried after a refusal for capacity (Warren's 429), so far. */
  readonly retries: number;
}

const since = (t: number) => performance.now() - t;

/** Wall time of `fn` and its value. */
async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const t = performance.now();
  const value = await fn();
  return [value, since(t)];
}

/** `n` Python sandboxes, or none: those made are killed when one fails. */
async function createAll(backend: Backend, n: number): Promise<Box[]> {
  const made = await Promise.allSettled(Array.from({ length: n }, () => backend.createPython()));
  const boxes = made.flatMap((m) => (m.status === "fulfilled" ? [m.value] : []));
  const failed = made.find((m) => m.status === "rejected");
  if (!failed) return boxes;
  await Promise.all(boxes.map((box) => box.kill().catch(() => {})));
  throw failed.reason;
}

export interface RewardRun {
  readonly clients: number;
  readonly fresh: boolean;
  readonly samples: number;
  readonly wallMs: number;
  /** Per sample: create (fresh) and run, until its reward is known. */
  readonly latenciesMs: number[];
  readonly errors: number;
  readonly firstError?: string;
}

/**
 * `clients` concurrent loops of `perClient` samples each. Fresh: create, run, kill per
 * sample. Reused: one sandbox per client, created before the clock starts.
 */
export async function rewardWorkload(
  backend: Backend,
  clients: number,
  perClient: number,
  fresh: boolean,
): Promise<RewardRun> {
  const latenciesMs: number[] = [];
  let errors = 0;
  let firstError: string | undefined;
  const fail = (err: unknown) => {
    errors++;
    firstError ??= err instanceof Error ? err.message : String(err);
  };
  const reused = fresh ? [] : await createAll(backend, clients);
  const t = performance.now();
  await Promise.all(
    Array.from({ length: clients }, async (_, c) => {
      for (let s = 0; s < perClient; s++) {
        const sample = rewardSample(c * perClient + s);
        const start = performance.now();
        let box: Box | undefined = reused[c];
        try {
          box ??= await backend.createPython();
          const reward = await box.python(sample.code);
          latenciesMs.push(since(start));
          if (reward !== sample.reward) fail(new Error(`sample ${c}/${s}: reward ${reward}`));
        } catch (err) {
          fail(err);
        } finally {
          if (fresh) await box?.kill().catch(fail);
        }
      }
    }),
  );
  const wallMs = since(t);
  await Promise.all(reused.map((box) => box.kill().catch(fail)));
  return { clients, fresh, samples: clients * perClient, wallMs, latenciesMs, errors, firstError };
}

export interface GroupRun {
  /** Setup once, fork ×size, each child edits and tests, children killed. */
  readonly forkedMs: number;
  readonly setupMs: number;
  readonly forkMs: number;
  /** `size` creates, each redoing the setup, then its edit and tests, then killed. */
  readonly createdMs: number;
  readonly rewards: { forked: number[]; created: number[] };
  readonly errors: number;
}

/** What one member of a group does once it has the set-up repository: its edit, the tests. */
async function member(box: Box, i: number): Promise<number> {
  const edit = groupEdit(i);
  const applied = await box.sh(edit.script);
  if (applied.exitCode !== 0) throw new Error(`edit ${i} failed in ${box.id}`);
  const tests = await box.sh(RUN_TESTS);
  return tests.exitCode === 0 ? 1 : 0;
}

/** The environment: the repository, and a Python context that has imported it. */
async function setUp(box: Box): Promise<void> {
  const made = await box.sh(repoSetupScript());
  if (made.exitCode !== 0) throw new Error(`setup failed in ${box.id}: ${made.stdout}`);
  const imported = await box.python(`import sys\nsys.path.insert(0, '${REPO_DIR}')\nimport stats`);
  if (imported !== 1) throw new Error(`import stats failed in ${box.id}`);
}

export async function grpoGroup(backend: Backend, size: number): Promise<GroupRun> {
  const expected = Array.from({ length: size }, (_, i) => groupEdit(i).reward);
  let errors = 0;
  const check = (rewards: number[]) => {
    errors += rewards.filter((r, i) => r !== expected[i]).length;
  };

  const t = performance.now();
  const source = await backend.createPython();
  let setupMs: number;
  let forkMs: number;
  let forked: number[];
  let forkedMs: number;
  try {
    [, setupMs] = await timed(() => setUp(source));
    let children: Box[];
    [children, forkMs] = await timed(() => backend.fork(source, size));
    forked = await Promise.all(
      children.map(async (child, i) => {
        try {
          return await member(child, i);
        } finally {
          await child.kill();
        }
      }),
    );
    forkedMs = since(t);
  } finally {
    await source.kill();
  }
  check(forked);

  const c = performance.now();
  const created = await Promise.all(
    Array.from({ length: size }, async (_, i) => {
      const box = await backend.createPython();
      try {
        await setUp(box);
        return await member(box, i);
      } finally {
        await box.kill();
      }
    }),
  );
  const createdMs = since(c);
  check(created);
  return { forkedMs, setupMs, forkMs, createdMs, rewards: { forked, created }, errors };
}

export interface RolloutRun {
  readonly turns: number;
  /** The first `snapshotAt` turns, in one sandbox. */
  readonly trunkMs: number;
  readonly snapshotMs: number;
  /** Each branch: started from the snapshot, its remaining turns, until done. */
  readonly branchMs: number[];
  /** Turns per second over the whole rollout (trunk, snapshot, branches in parallel). */
  readonly turnsPerSec: number;
  readonly errors: number;
}

async function playTurns(box: Box, from: number, to: number): Promise<number> {
  let errors = 0;
  for (let t = from; t <= to; t++) {
    const turn = agentTurn(t);
    const result = await box.sh(turn.script);
    // Tests fail (median is wrong): only an edit or a read must succeed.
    if (turn.kind !== "test" && result.exitCode !== 0) errors++;
  }
  return errors;
}

export async function multiTurnRollout(
  backend: Backend,
  turns: number,
  snapshotAt: number,
  branches: number,
): Promise<RolloutRun> {
  const t = performance.now();
  const trunk = await backend.createRepo();
  let errors = await playTurns(trunk, 1, snapshotAt);
  const trunkMs = since(t);
  const [ref, snapshotMs] = await timed(() => backend.snapshot(trunk));
  await trunk.kill();
  const branchMs = await Promise.all(
    Array.from({ length: branches }, async () => {
      const b = performance.now();
      const box = await backend.fromSnapshot(ref);
      try {
        const seen = await box.sh(`ls ${REPO_DIR}/notes | wc -l`);
        if (seen.stdout.trim() !== String(Math.floor(snapshotAt / 3))) errors++;
        errors += await playTurns(box, snapshotAt + 1, turns);
      } finally {
        await box.kill();
      }
      return since(b);
    }),
  );
  const totalTurns = snapshotAt + branches * (turns - snapshotAt);
  return {
    turns,
    trunkMs,
    snapshotMs,
    branchMs,
    turnsPerSec: totalTurns / (since(t) / 1000),
    errors,
  };
}
