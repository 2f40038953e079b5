import { randomBytes } from "node:crypto";
import {
  ENVD_INIT_STEPS,
  ENVD_INIT_STEPS_HEADER,
  ENVD_LOGS_PATH,
  type EnvdInitRequest,
  type EnvdMetrics,
  INIT_SEED_BYTES,
} from "../../protocol/index.js";
import { type GuestReply, WarrenError } from "../../shared/index.js";
import { addPhase } from "../../shared/phases.js";
import { EnvdClient, replyExcerpt } from "./envd-client.js";
import type { EnvdLogLine, GuestAgent, InitOptions } from "./guest-agent.js";

// Every call below goes to a guest whose root user may have replaced envd with anything:
// each is bounded in size and in total time (EnvdClient), and aborts with its caller's signal.

/** A /metrics call, whole. */
export const METRICS_TIMEOUT_MS = 5_000;
/** One /health poll, whole (the polls go on until the caller's deadline). */
const HEALTH_POLL_TIMEOUT_MS = 2_000;
/**
 * The whole warm-up walk (`exercise`): /init, /files twice, ListDir, a login shell. Under TCG
 * on a busy host it takes seconds; each of its calls used to have 30 to 60 s of its own.
 */
export const EXERCISE_TIMEOUT_MS = 120_000;
/** Largest Connect message taken from envd during the walk (ListDir of /tmp, process events). */
const CONNECT_READ_MAX_BYTES = 8 * 1024 * 1024;

/**
 * A client of `host`'s envd for one call, closed after it: no connection outlives the call (a
 * slot's address is reused by the next sandbox).
 */
async function withEnvd<T>(
  host: string,
  token: string | undefined,
  call: (envd: EnvdClient) => Promise<T>,
): Promise<T> {
  const envd = new EnvdClient(host, { token, readMaxBytes: CONNECT_READ_MAX_BYTES });
  try {
    return await call(envd);
  } finally {
    envd.close();
  }
}

/**
 * One /init attempt's body: `body`, fresh random bytes for the guest's kernel (every VM
 * restored from one snapshot starts with its siblings' random state), and when `stamped` the
 * host's time.
 */
export function initAttempt(body: EnvdInitRequest, stamped: boolean): EnvdInitRequest {
  return {
    ...body,
    seed: randomBytes(INIT_SEED_BYTES).toString("base64"),
    ...(stamped && { timestamp: new Date().toISOString() }),
  };
}

/**
 * POST /init until envd answers, as E2B's orchestrator does after every start and resume:
 * the sandbox is usable once it returns. A refused connection is retried every 5 ms; a
 * connection that was accepted is given the rest of the deadline to answer, whole (when many
 * guests start at once on few cores, aborting slow answers would only start the work again;
 * a guest that trickles its answer is cut at the deadline all the same). `stamped` (default
 * true) sends the host's time, which envd sets its clock to and orders /inits by. Every
 * attempt carries a seed of its own (`initAttempt`). The signal (a kill) aborts the exchange
 * in flight, not only the next attempt.
 */
async function initEnvd(
  envd: EnvdClient,
  body: EnvdInitRequest,
  options: Omit<InitOptions, "token">,
): Promise<void> {
  const { signal } = options;
  const deadline = performance.now() + options.deadlineMs;
  let lastError = "no attempt";
  for (;;) {
    signal?.throwIfAborted();
    const remainingMs = Math.round(deadline - performance.now());
    if (remainingMs <= 0) break;
    let reply: GuestReply;
    try {
      reply = await envd.request("POST", "/init", {
        json: initAttempt(body, options.stamped !== false),
        timeoutMs: remainingMs,
        signal,
      });
    } catch (err) {
      signal?.throwIfAborted();
      // Too slow or too large: retrying would meet the same guest.
      if (err instanceof WarrenError) throw err;
      lastError = err instanceof Error ? err.message : String(err);
      await new Promise((resolve) => setTimeout(resolve, 5));
      continue;
    }
    if (reply.status === 204) {
      recordInitSteps(reply.headers[ENVD_INIT_STEPS_HEADER]);
      return;
    }
    // An answer other than 204 will not change by retrying (bad token, bad body).
    throw new WarrenError("internal", `envd refused /init: ${reply.status} ${replyExcerpt(reply)}`);
  }
  throw new WarrenError(
    "guest_unavailable",
    `envd did not answer within ${options.deadlineMs} ms (${lastError})`,
  );
}

/**
 * /init's own split (`parse=0.4,trust=12.1,…`) as phases `guest.init.<step>` of the
 * operation, taken out of `guest.init`'s own time: what the guest did, apart from the
 * exchange. Only the steps envd has, each once, each within the exchange's bound; anything
 * else a guest sends is dropped.
 */
export function recordInitSteps(header: string | string[] | undefined): void {
  if (typeof header !== "string" || header.length > 256) return;
  const seen = new Set<string>();
  for (const entry of header.split(",")) {
    const [step, value = ""] = entry.split("=");
    const ms = /^\d{1,6}(\.\d{1,3})?$/.test(value) ? Number(value) : Number.NaN;
    const known = (ENVD_INIT_STEPS as readonly string[]).includes(step ?? "");
    if (!known || seen.has(step as string) || !(ms <= 600_000)) continue;
    seen.add(step as string);
    addPhase(`guest.init.${step}`, ms);
  }
}

/** Metric fields envd reports, all numbers; anything else a guest sends is dropped. */
const METRIC_FIELDS = [
  "ts",
  "cpu_count",
  "cpu_used_pct",
  "mem_total",
  "mem_used",
  "mem_cache",
  "mem_total_mib",
  "mem_used_mib",
  "disk_used",
  "disk_total",
] as const satisfies readonly (keyof EnvdMetrics)[];

/** GET /metrics from a running sandbox's envd: a whole exchange within METRICS_TIMEOUT_MS. */
async function readEnvdMetrics(envd: EnvdClient, signal?: AbortSignal): Promise<EnvdMetrics> {
  const reply = await envd.request("GET", "/metrics", {
    timeoutMs: METRICS_TIMEOUT_MS,
    signal,
  });
  if (reply.status !== 200) {
    throw new WarrenError(
      "internal",
      `envd /metrics answered ${reply.status}: ${replyExcerpt(reply)}`,
    );
  }
  return parseMetrics(reply.body);
}

/** The metrics as numbers (what the API hands on), or guest_reply_invalid. */
export function parseMetrics(body: Buffer): EnvdMetrics {
  let value: unknown;
  try {
    value = JSON.parse(body.toString("utf8"));
  } catch {
    throw new WarrenError("guest_reply_invalid", "envd /metrics: the reply is not JSON");
  }
  const fields = (typeof value === "object" && value !== null ? value : {}) as Record<
    string,
    unknown
  >;
  const metrics: Partial<Record<keyof EnvdMetrics, number>> = {};
  for (const key of METRIC_FIELDS) {
    const n = fields[key];
    if (typeof n !== "number" || !Number.isFinite(n)) {
      throw new WarrenError("guest_reply_invalid", `envd /metrics: ${key} is not a number`);
    }
    metrics[key] = n;
  }
  return metrics as EnvdMetrics;
}

/** envd's own log lines after `after` (its internal route), checked line by line. */
async function readEnvdLogs(
  envd: EnvdClient,
  after: number,
  signal?: AbortSignal,
): Promise<EnvdLogLine[]> {
  const reply = await envd.request("GET", `${ENVD_LOGS_PATH}?after=${after}`, {
    timeoutMs: METRICS_TIMEOUT_MS,
    signal,
  });
  if (reply.status !== 200) {
    throw new WarrenError("internal", `envd logs answered ${reply.status}: ${replyExcerpt(reply)}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(reply.body.toString("utf8"));
  } catch {
    throw new WarrenError("guest_reply_invalid", "envd logs: the reply is not JSON");
  }
  if (!Array.isArray(value)) throw new WarrenError("guest_reply_invalid", "envd logs: not a list");
  // The guest's root may write anything there: lines that are not envd's shape are dropped.
  return value.filter(
    (line): line is EnvdLogLine =>
      typeof line === "object" &&
      line !== null &&
      Number.isSafeInteger(line.seq) &&
      Number.isFinite(line.timestamp) &&
      ["info", "warn", "error"].includes(line.level) &&
      typeof line.message === "string" &&
      line.message.length <= 2_000,
  );
}

/**
 * Polls GET /health until envd answers 204 (a cold boot); fails early if the VMM exits, and
 * at once when the signal aborts. Each poll is whole within 2 s and within the deadline.
 */
async function waitForHealth(
  envd: EnvdClient,
  options: { deadlineMs: number; exited?: Promise<unknown>; signal?: AbortSignal },
): Promise<void> {
  const { signal } = options;
  let gone = false;
  void options.exited?.then(() => {
    gone = true;
  });
  const deadline = performance.now() + options.deadlineMs;
  for (;;) {
    signal?.throwIfAborted();
    if (gone) throw new WarrenError("internal", "the VM exited before envd answered");
    const remainingMs = Math.round(deadline - performance.now());
    if (remainingMs <= 0) break;
    const reply = await envd
      .request("GET", "/health", {
        timeoutMs: Math.min(HEALTH_POLL_TIMEOUT_MS, remainingMs),
        signal,
      })
      .catch((err: unknown) => {
        signal?.throwIfAborted();
        // Polling again would only take the same oversized reply again.
        if (err instanceof WarrenError && err.reason === "guest_reply_invalid") throw err;
        return undefined;
      });
    if (reply?.status === 204) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new WarrenError(
    "guest_unavailable",
    `envd did not become healthy within ${options.deadlineMs} ms`,
  );
}

const EXERCISE_FILE = "/tmp/.warren-exercise";
const EXERCISE_BOUNDARY = "warren-exercise";

/**
 * Walks envd's hot paths once, as a client's first calls would: /init, a file written, read
 * and listed, a login shell. V8 compiles each JavaScript
 * function on its first call; under TCG that runs its parser through translation, ~1.5 s of
 * a first command. Done before the template is captured, every sandbox starts with those
 * functions compiled; done in a pooled VMM, its QEMU has the code translated as well. The
 * shell removes the file and runs `sync`: what the walk dirtied is written now, not by the
 * guest's flusher right after a create. The whole walk is bounded by EXERCISE_TIMEOUT_MS,
 * and aborts with `signal`.
 */
async function exerciseEnvd(envd: EnvdClient, signal?: AbortSignal): Promise<void> {
  const deadline = performance.now() + EXERCISE_TIMEOUT_MS;
  const left = () => Math.max(1, Math.round(deadline - performance.now()));
  const budget = AbortSignal.timeout(EXERCISE_TIMEOUT_MS);
  const walk = signal ? AbortSignal.any([signal, budget]) : budget;
  // Unstamped: envd would otherwise ignore every /init stamped earlier than this one, and a
  // template lives on while the host clock may be stepped back.
  await initEnvd(envd, {}, { deadlineMs: left(), stamped: false, signal });
  const query = `?path=${encodeURIComponent(EXERCISE_FILE)}&username=user`;
  const form = {
    contentType: `multipart/form-data; boundary=${EXERCISE_BOUNDARY}`,
    body: [
      `--${EXERCISE_BOUNDARY}`,
      'content-disposition: form-data; name="file"; filename="exercise"',
      "content-type: application/octet-stream",
      "",
      "warren",
      `--${EXERCISE_BOUNDARY}--`,
      "",
    ].join("\r\n"),
  };
  for (const [method, options] of [
    ["POST", form],
    ["GET", {}],
  ] as const) {
    const reply = await envd.request(method, `/files${query}`, {
      ...options,
      timeoutMs: left(),
      signal,
    });
    if (reply.status >= 300)
      throw new WarrenError(
        "internal",
        `envd ${method} /files answered ${reply.status}: ${replyExcerpt(reply)}`,
      );
  }
  try {
    const headers = rpcHeaders(envd, "user");
    await envd.filesystem.listDir({ path: "/tmp", depth: 1 }, { headers, signal: walk });
    await runToEnd(envd, headers, walk, {
      // bash as the SDK runs commands, where the image has it (an Alpine image may not).
      cmd: "/bin/sh",
      args: [
        "-c",
        'if [ -x /bin/bash ]; then exec /bin/bash -l -c "$0"; fi; exec /bin/sh -c "$0"',
        `rm -f ${EXERCISE_FILE}; sync`,
      ],
    });
  } catch (err) {
    signal?.throwIfAborted();
    if (budget.aborted) {
      throw new WarrenError(
        "guest_unavailable",
        `envd's warm-up walk did not finish within ${EXERCISE_TIMEOUT_MS} ms`,
      );
    }
    throw err;
  }
}

/** Longest a guest's `sync` may take before a filesystem-only pause goes on without it. */
const SYNC_TIMEOUT_MS = 15_000;

/** Runs `sync` in the guest as root, bounded by SYNC_TIMEOUT_MS (and `signal`). */
async function syncGuest(envd: EnvdClient, signal?: AbortSignal): Promise<void> {
  const budget = AbortSignal.timeout(SYNC_TIMEOUT_MS);
  const bounded = signal ? AbortSignal.any([signal, budget]) : budget;
  await runToEnd(envd, rpcHeaders(envd, "root"), bounded, {
    cmd: "/bin/sh",
    args: ["-c", "sync"],
  });
}

/** A Connect call's headers as the e2b SDK sends them: as `user`, keepalive pings asked for. */
function rpcHeaders(envd: EnvdClient, user: string): Record<string, string> {
  return { ...envd.headers(user), "keepalive-ping-interval": "50" };
}

/** Starts a process through envd and drains its events until it ends. */
async function runToEnd(
  envd: EnvdClient,
  headers: Record<string, string>,
  signal: AbortSignal,
  process: { cmd: string; args: string[] },
): Promise<void> {
  const stream = envd.process.start({ process, stdin: false }, { headers, signal });
  for await (const _event of stream) {
    // Drained until the process ends (or the time is up).
  }
}

/** The real guest agent: envd over HTTP and Connect (EnvdClient), every call bounded. */
export class EnvdGuestAgent implements GuestAgent {
  init(host: string, body: EnvdInitRequest, options: InitOptions): Promise<void> {
    return withEnvd(host, options.token, (envd) => initEnvd(envd, body, options));
  }
  waitForHealth(
    host: string,
    options: { deadlineMs: number; exited?: Promise<unknown>; signal?: AbortSignal },
  ) {
    return withEnvd(host, undefined, (envd) => waitForHealth(envd, options));
  }
  exercise(host: string, token?: string, signal?: AbortSignal): Promise<void> {
    return withEnvd(host, token, (envd) => exerciseEnvd(envd, signal));
  }
  metrics(host: string, token?: string, signal?: AbortSignal): Promise<EnvdMetrics> {
    return withEnvd(host, token, (envd) => readEnvdMetrics(envd, signal));
  }
  sync(host: string, token?: string, signal?: AbortSignal): Promise<void> {
    return withEnvd(host, token, (envd) => syncGuest(envd, signal));
  }
  logs(host: string, token: string | undefined, after: number, signal?: AbortSignal) {
    return withEnvd(host, token, (envd) => readEnvdLogs(envd, after, signal));
  }
}
