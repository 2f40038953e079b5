// A burst of creates far larger than the node (or cluster): all sent at once as plain HTTP
// (the status, reason and Retry-After each got are the contract under test), each one
// admitted then asked its first command through the real SDK. Shared by test/e2e/burst.test.ts
// and bench/burst.ts.
import { Sandbox } from "e2b";
import { percentile } from "./load.js";

export interface BurstOptions {
  readonly creates: number;
  /** The API (a node's, or a gateway's) and a key the SDK's settings would carry. */
  readonly apiUrl: string;
  readonly apiKey: string;
  readonly template?: string;
}

/** One create of the burst, as its client saw it. */
export interface BurstAnswer {
  readonly index: number;
  readonly status: number;
  readonly reason?: string;
  readonly message?: string;
  readonly retryAfter?: string;
  /** From the burst's start to the create's answer, ms. */
  readonly answeredMs: number;
  readonly sandboxId?: string;
  /** From the burst's start to the first command's result (admitted ones that answered), ms. */
  readonly firstCommandMs?: number;
  /** What went wrong after a 201 (the command failed): never expected. */
  readonly failure?: string;
}

export interface BurstResult {
  readonly answers: readonly BurstAnswer[];
  readonly durationMs: number;
}

/** Sends every create at once; each admitted one then runs `true` in its sandbox. */
export async function runBurst(options: BurstOptions): Promise<BurstResult> {
  const started = performance.now();
  const since = () => Math.round(performance.now() - started);
  const answers = await Promise.all(
    Array.from({ length: options.creates }, (_, index) => oneCreate(options, index, since)),
  );
  return { answers, durationMs: since() };
}

async function oneCreate(
  options: BurstOptions,
  index: number,
  since: () => number,
): Promise<BurstAnswer> {
  let res: Response;
  try {
    res = await fetch(`${options.apiUrl}/sandboxes`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": options.apiKey },
      body: JSON.stringify({ templateID: options.template ?? "base", timeout: 600 }),
    });
  } catch (err) {
    return { index, status: 0, answeredMs: since(), failure: `create: ${String(err)}` };
  }
  const body = (await res.json().catch(() => ({}))) as {
    sandboxID?: string;
    reason?: string;
    message?: string;
  };
  const answer: BurstAnswer = {
    index,
    status: res.status,
    reason: body.reason,
    message: body.message,
    retryAfter: res.headers.get("retry-after") ?? undefined,
    answeredMs: since(),
    sandboxId: body.sandboxID,
  };
  if (res.status !== 201 || !body.sandboxID) return answer;
  try {
    const sandbox = await Sandbox.connect(body.sandboxID, {
      apiUrl: options.apiUrl,
      apiKey: options.apiKey,
    });
    await sandbox.commands.run("true");
    return { ...answer, firstCommandMs: since() };
  } catch (err) {
    return { ...answer, failure: `first command: ${String(err)}` };
  }
}

/** Kills every sandbox the burst made (through the same API). */
export async function killBurst(options: BurstOptions, result: BurstResult): Promise<void> {
  const ids = result.answers.flatMap((a) => (a.sandboxId ? [a.sandboxId] : []));
  for (let i = 0; i < ids.length; i += 16) {
    await Promise.all(
      ids.slice(i, i + 16).map(async (id) => {
        const res = await fetch(`${options.apiUrl}/sandboxes/${id}`, {
          method: "DELETE",
          headers: { "x-api-key": options.apiKey },
        });
        await res.arrayBuffer();
      }),
    );
  }
}

/** The figures a burst is judged by. */
export interface BurstSummary {
  readonly creates: number;
  readonly admitted: number;
  readonly answered: number;
  /** 429s by reason; a gateway's by what each node it tried said (`cluster_full: a+b`). */
  readonly refused: Readonly<Record<string, number>>;
  /** Anything neither a 201 that answered nor a 429 with a Retry-After: must be none. */
  readonly errors: readonly string[];
  /** Admitted creates' time to first command, from the burst's start: p50, p99, and their ratio. */
  readonly firstCommandP50Ms: number;
  readonly firstCommandP99Ms: number;
  readonly spread: number;
  /** How long refusals took to come back: p50, p99 (prompt: well under the queue's wait). */
  readonly refusedP50Ms: number;
  readonly refusedP99Ms: number;
  /** Sandboxes answering per second, from the burst's start to its last first command. */
  readonly answeringPerSecond: number;
  /** Whether each admitted create answered in arrival order, as a share of pairs in order. */
  readonly orderedPairs: number;
}

export function summarizeBurst(result: BurstResult): BurstSummary {
  const { answers } = result;
  const admitted = answers.filter((a) => a.status === 201);
  const answered = admitted.filter((a) => a.firstCommandMs !== undefined);
  const refused = answers.filter((a) => a.status === 429 && a.retryAfter !== undefined);
  const errors = answers.flatMap((a) =>
    a.failure
      ? [`#${a.index}: ${a.failure}`]
      : a.status === 201 || (a.status === 429 && a.retryAfter !== undefined)
        ? []
        : [`#${a.index}: ${a.status} ${a.reason ?? ""} retry-after ${a.retryAfter ?? "none"}`],
  );
  const byReason: Record<string, number> = {};
  for (const a of refused) byReason[refusalKey(a)] = (byReason[refusalKey(a)] ?? 0) + 1;
  const firsts = answered.map((a) => a.firstCommandMs as number);
  const lastMs = Math.max(0, ...firsts);
  const p50 = percentile(firsts, 50);
  const p99 = percentile(firsts, 99);
  const refusedMs = refused.map((a) => a.answeredMs);
  return {
    creates: answers.length,
    admitted: admitted.length,
    answered: answered.length,
    refused: byReason,
    errors,
    firstCommandP50Ms: p50,
    firstCommandP99Ms: p99,
    spread: p50 > 0 ? Math.round((p99 / p50) * 100) / 100 : 0,
    refusedP50Ms: percentile(refusedMs, 50),
    refusedP99Ms: percentile(refusedMs, 99),
    answeringPerSecond: lastMs > 0 ? Math.round((answered.length / lastMs) * 10_000) / 10 : 0,
    orderedPairs: orderedShare(answered),
  };
}

/** A refusal's reason, with what the nodes said when a gateway refused ("node1: x, node2: y"). */
function refusalKey(answer: BurstAnswer): string {
  const reason = answer.reason ?? "429";
  if (reason !== "cluster_full") return reason;
  const tried = /\(([^)]*)\)/.exec(answer.message ?? "")?.[1];
  if (!tried) return reason;
  const said = tried.split(", ").map((part) => part.split(": ")[1] ?? part);
  return `${reason}: ${[...new Set(said)].sort().join("+")}`;
}

/** Of admitted creates, the share of pairs (by arrival) whose answers came in that order. */
function orderedShare(answered: readonly BurstAnswer[]): number {
  const byArrival = [...answered].sort((a, b) => a.index - b.index);
  let pairs = 0;
  let ordered = 0;
  for (let i = 0; i < byArrival.length; i++) {
    for (let j = i + 1; j < byArrival.length; j++) {
      pairs += 1;
      if ((byArrival[i]?.answeredMs ?? 0) <= (byArrival[j]?.answeredMs ?? 0)) ordered += 1;
    }
  }
  return pairs === 0 ? 1 : Math.round((ordered / pairs) * 1000) / 1000;
}

/** The server's `/health` while a burst runs: how many checks, how many failed, the slowest. */
export interface HealthWatch {
  readonly checks: number;
  readonly failed: number;
  readonly worstMs: number;
}

/** Asks `url`/health every 250 ms until `done` settles (the burst), and says how it went. */
export async function watchHealth(url: string, done: Promise<unknown>): Promise<HealthWatch> {
  let finished = false;
  void done.finally(() => {
    finished = true;
  });
  let checks = 0;
  let failed = 0;
  let worstMs = 0;
  while (!finished) {
    const t0 = performance.now();
    const res = await fetch(`${url}/health`).catch(() => undefined);
    await res?.arrayBuffer();
    checks += 1;
    if (res?.status === 200) worstMs = Math.max(worstMs, performance.now() - t0);
    else failed += 1;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return { checks, failed, worstMs: Math.round(worstMs) };
}
