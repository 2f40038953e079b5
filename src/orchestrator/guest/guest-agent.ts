import type { EnvdInitRequest, EnvdMetrics } from "../../protocol/index.js";

/**
 * The guest seam: how the orchestrator talks to envd inside a VM, by the address the host
 * reaches it at (its slot's `hostAddress`). `EnvdGuestAgent` speaks HTTP to the real agent; unit
 * tests use an in-memory fake that plays the guest. The guest's root user may replace envd
 * with anything: every call is bounded in time and size, and aborts with its `signal` (a
 * kill, a pause, a server closing) at once rather than waiting for the guest.
 */
export interface GuestAgent {
  /**
   * POST /init until envd answers, as E2B's orchestrator does after every start and resume:
   * env vars, access token, clock and a fresh random seed for the guest's kernel (a restored
   * or forked guest starts with its siblings' random state). `token`: the one the guest's
   * envd holds now. Fails at once when envd refuses, after `deadlineMs` when it never answers.
   */
  init(host: string, body: EnvdInitRequest, options: InitOptions): Promise<void>;
  /** Polls envd until it answers (a cold boot); fails early when `exited` settles. */
  waitForHealth(
    host: string,
    options: { deadlineMs: number; exited?: Promise<unknown>; signal?: AbortSignal },
  ): Promise<void>;
  /**
   * Walks envd's hot paths once, as a client's first calls would (template, pool warm-up).
   * `token`: the access token a captured envd already has (a secured sandbox's snapshot).
   */
  exercise(host: string, token?: string, signal?: AbortSignal): Promise<void>;
  /** One sample of envd's /metrics. */
  metrics(host: string, token?: string, signal?: AbortSignal): Promise<EnvdMetrics>;
  /** `sync` in the guest as root: its page cache written to its disk (bounded in time). */
  sync(host: string, token?: string, signal?: AbortSignal): Promise<void>;
  /** envd's own log lines after `after` (a seq), oldest first; the newest when many. */
  logs(
    host: string,
    token: string | undefined,
    after: number,
    signal?: AbortSignal,
  ): Promise<EnvdLogLine[]>;
}

/** One line of envd's log (the agent's AgentLogEntry, as the guest claims it). */
export interface EnvdLogLine {
  readonly seq: number;
  readonly timestamp: number;
  readonly level: "info" | "warn" | "error";
  readonly message: string;
}

export interface InitOptions {
  readonly token?: string;
  readonly deadlineMs: number;
  readonly signal?: AbortSignal;
  /** Default true: send the host's time, which envd sets its clock to and orders /inits by. */
  readonly stamped?: boolean;
}
