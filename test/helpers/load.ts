// Load through the real SDK: N clients each run M cycles of create → command → pause →
// resume → fork → kill (child and parent), all at once against one server. Every error but
// a clear 429 (capacity_exhausted, memory_pressure, network_exhausted, start_queue_*: the node said "not
// now") counts as a failure; a 429 ends that cycle and the client goes on after the
// server's Retry-After. Shared by test/e2e/load.test.ts and bench/load.ts.
import { Sandbox } from "e2b";

export interface LoadOptions {
  readonly clients: number;
  readonly cycles: number;
  /** Said after every cycle (progress). */
  readonly onCycle?: (done: number, total: number) => void;
}

export interface LoadResult {
  readonly cycles: number;
  readonly completed: number;
  /** Cycles cut short by a 429, by the error's reason. */
  readonly refused: Readonly<Record<string, number>>;
  /** Anything else: each a line with the step and the error. */
  readonly failures: readonly string[];
  readonly durationMs: number;
  /** Per step, every duration (ms) of a step that succeeded. */
  readonly steps: Readonly<Record<string, readonly number[]>>;
}

const STEPS = ["create", "command", "pause", "resume", "fork", "kill"] as const;
type Step = (typeof STEPS)[number];

/** A 429's reason from the SDK's error (its message carries the API's JSON), else undefined. */
function refusal(err: unknown): string | undefined {
  const text = err instanceof Error ? `${err.name} ${err.message}` : String(err);
  if (!/429|RateLimit|rate limit/i.test(text)) return undefined;
  return (
    /memory_pressure|capacity_exhausted|network_exhausted|start_queue_full|start_queue_timeout/.exec(
      text,
    )?.[0] ?? "429"
  );
}

/** Warren's own API with the SDK's settings (E2B_API_URL, E2B_API_KEY). */
async function warrenApi(method: string, path: string, body?: object): Promise<[number, unknown]> {
  const res = await fetch(`${process.env.E2B_API_URL}${path}`, {
    method,
    headers: { "content-type": "application/json", "x-api-key": process.env.E2B_API_KEY ?? "" },
    body: body && JSON.stringify(body),
  });
  return [res.status, await res.json().catch(() => undefined)];
}

/** POST /sandboxes/{id}/fork with count 1: the child's id (a refused child throws its error). */
async function forkOnce(sandbox: Sandbox): Promise<string> {
  const [status, body] = await warrenApi("POST", `/sandboxes/${sandbox.sandboxId}/fork`, {
    count: 1,
  });
  const [first] = (Array.isArray(body) ? body : []) as {
    sandbox?: { sandboxID: string };
    error?: { code: number; reason?: string; message: string };
  }[];
  if (status !== 201 || !first) throw new Error(`fork ${status}: ${JSON.stringify(body)}`);
  if (first.error)
    throw new Error(`fork child ${first.error.code}: ${JSON.stringify(first.error)}`);
  return first.sandbox?.sandboxID as string;
}

export async function runLoad(options: LoadOptions): Promise<LoadResult> {
  const total = options.clients * options.cycles;
  const steps: Record<Step, number[]> = {
    create: [],
    command: [],
    pause: [],
    resume: [],
    fork: [],
    kill: [],
  };
  const refused: Record<string, number> = {};
  const failures: string[] = [];
  let completed = 0;
  let done = 0;
  const started = performance.now();

  const timed = async <T>(step: Step, work: () => Promise<T>): Promise<T> => {
    const t = performance.now();
    const result = await work();
    steps[step].push(performance.now() - t);
    return result;
  };

  const cycle = async (client: number, n: number) => {
    const made: string[] = [];
    let step: Step = "create";
    try {
      const sandbox = await timed("create", () => Sandbox.create({ timeoutMs: 300_000 }));
      made.push(sandbox.sandboxId);
      step = "command";
      const out = await timed("command", () => sandbox.commands.run(`echo ${client}-${n}`));
      if (out.stdout.trim() !== `${client}-${n}`) throw new Error(`stdout ${out.stdout}`);
      step = "pause";
      await timed("pause", () => sandbox.betaPause());
      step = "resume";
      const resumed = await timed("resume", () => Sandbox.connect(sandbox.sandboxId));
      step = "fork";
      made.push(await timed("fork", () => forkOnce(resumed)));
      step = "kill";
      await timed("kill", async () => {
        for (const id of made.reverse()) await Sandbox.kill(id);
      });
      made.length = 0;
      completed += 1;
    } catch (err) {
      const reason = refusal(err);
      if (reason) {
        refused[reason] = (refused[reason] ?? 0) + 1;
        await new Promise((resolve) => setTimeout(resolve, 1_000)); // Retry-After: 1
      } else {
        failures.push(
          `client ${client} cycle ${n} ${step}: ${(err as Error).message?.split("\n")[0]}`,
        );
      }
      for (const id of made) await Sandbox.kill(id).catch(() => {});
    } finally {
      options.onCycle?.(++done, total);
    }
  };

  await Promise.all(
    Array.from({ length: options.clients }, async (_, client) => {
      for (let n = 0; n < options.cycles; n++) await cycle(client, n);
    }),
  );
  return {
    cycles: total,
    completed,
    refused,
    failures,
    durationMs: performance.now() - started,
    steps,
  };
}

/** Sandboxes the server still lists, running or paused (after the load there must be none). */
export async function listedSandboxes(): Promise<string[]> {
  const [, body] = await warrenApi("GET", "/v2/sandboxes?state=running,paused&limit=1000");
  return ((Array.isArray(body) ? body : []) as { sandboxID: string }[]).map((s) => s.sandboxID);
}

export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}
