import type { Readable } from "node:stream";
import { EnvdClient, replyExcerpt } from "../orchestrator/index.js";
import { WarrenError } from "../shared/index.js";

/** How a command runs in the build VM: as whom, where, with which environment. */
export interface CommandContext {
  readonly user: string;
  readonly envVars: Readonly<Record<string, string>>;
  /** Absent: the user's home (envd's default). */
  readonly workdir?: string;
}

export interface RunResult {
  readonly exitCode: number;
  /** The last lines of output (stdout and stderr interleaved), for an error message. */
  readonly tail: string;
}

/** Lines kept for a failed command's message. */
const TAIL_LINES = 20;
/** A line longer than this is cut: the guest decides what it prints. */
const MAX_LINE_CHARS = 8_192;
// A build's steps run as root in the build VM: a RUN step may replace envd with anything.
// Every call below is bounded in size and time (EnvdClient), and ends with the build's signal.
/** Largest Connect message taken (envd sends process output in chunks of at most 64 KiB). */
const PROCESS_READ_MAX_BYTES = 1024 * 1024;
/** envd's /init (setDefaults), whole; and how long a start command has to be reported started. */
const CALL_TIMEOUT_MS = 30_000;

/**
 * Commands and files in a build VM, through its envd (the Connect process service and
 * `/files`) with the orchestrator's client: the VM's token, any user. One client for the
 * VM's life: its kept-alive connections are this VM's only.
 */
export class GuestShell {
  readonly #envd: EnvdClient;
  readonly #callTimeoutMs: number;

  /** `callTimeoutMs`: bound of /init and of a start command's start (tests shorten it). */
  constructor(host: string, accessToken?: string, options: { callTimeoutMs?: number } = {}) {
    this.#envd = new EnvdClient(host, {
      token: accessToken,
      readMaxBytes: PROCESS_READ_MAX_BYTES,
    });
    this.#callTimeoutMs = options.callTimeoutMs ?? CALL_TIMEOUT_MS;
  }

  /** Closes its connections (the VM is gone or about to be). */
  close(): void {
    this.#envd.close();
  }

  /** Runs `command` in a login shell to its end, each output line to `onLine`. */
  async run(
    command: string,
    context: CommandContext,
    options: { onLine?: (line: string) => void; signal?: AbortSignal; timeoutMs?: number },
  ): Promise<RunResult> {
    const tail: string[] = [];
    const lines = new LineSplitter((line) => {
      const cut = line.length > MAX_LINE_CHARS ? `${line.slice(0, MAX_LINE_CHARS)}…` : line;
      tail.push(cut);
      if (tail.length > TAIL_LINES) tail.shift();
      options.onLine?.(cut);
    });
    const signal = withTimeout(options.signal, options.timeoutMs);
    const stream = this.#envd.process.start(
      { process: shellCommand(command, context), stdin: false },
      { headers: this.#envd.headers(context.user), signal },
    );
    let exitCode: number | undefined;
    try {
      for await (const { event } of stream) {
        const e = event?.event;
        if (e?.case === "data") {
          const bytes = e.value.output.value;
          if (bytes instanceof Uint8Array) lines.push(bytes);
        } else if (e?.case === "end") {
          exitCode = e.value.exitCode;
          if (e.value.error) tail.push(e.value.error.slice(0, MAX_LINE_CHARS));
        }
      }
    } catch (err) {
      if (signal?.aborted && options.timeoutMs !== undefined && !options.signal?.aborted) {
        throw new WarrenError(
          "guest_unavailable",
          `'${command}' did not finish in ${options.timeoutMs} ms`,
        );
      }
      throw err;
    }
    lines.flush();
    if (exitCode === undefined) {
      throw new WarrenError("guest_unavailable", `'${command}' ended without an exit status`);
    }
    return { exitCode, tail: tail.join("\n") };
  }

  /**
   * Starts `command` (a template's start command) and resolves once envd says it started
   * (within the call timeout, else guest_unavailable). `ended` settles if it ends while
   * watched; `detach()` stops watching and leaves it running, owned by envd.
   */
  async start(
    command: string,
    context: CommandContext,
    signal?: AbortSignal,
  ): Promise<{ ended: Promise<RunResult>; detach: () => void }> {
    const local = new AbortController();
    const detach = () => local.abort();
    signal?.addEventListener("abort", detach, { once: true });
    const tail: string[] = [];
    const lines = new LineSplitter((line) => {
      tail.push(line.slice(0, MAX_LINE_CHARS));
      if (tail.length > TAIL_LINES) tail.shift();
    });
    const stream = this.#envd.process.start(
      { process: shellCommand(command, context), stdin: false, tag: "start-cmd" },
      { headers: this.#envd.headers(context.user), signal: local.signal },
    );
    let onStart: () => void = () => {};
    const started = new Promise<void>((resolve) => {
      onStart = resolve;
    });
    const ended = (async (): Promise<RunResult> => {
      for await (const { event } of stream) {
        const e = event?.event;
        if (e?.case === "start") onStart();
        else if (e?.case === "data" && e.value.output.value instanceof Uint8Array) {
          lines.push(e.value.output.value);
        } else if (e?.case === "end") {
          lines.flush();
          return { exitCode: e.value.exitCode, tail: tail.join("\n") };
        }
      }
      throw new WarrenError("guest_unavailable", `'${command}' ended without an exit status`);
    })().finally(() => signal?.removeEventListener("abort", detach));
    // Watching it is optional: a detached stream's end is nobody's error.
    ended.catch(() => {});
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new WarrenError(
              "guest_unavailable",
              `envd did not report '${command}' started within ${this.#callTimeoutMs} ms`,
            ),
          ),
        this.#callTimeoutMs,
      );
    });
    try {
      await Promise.race([started, ended, late]);
    } catch (err) {
      detach();
      throw err;
    } finally {
      clearTimeout(timer);
    }
    return { ended, detach };
  }

  /**
   * Makes `context` envd's defaults (its `/init`): environment, user, workdir. They live in
   * envd's memory, so a snapshot carries them to every sandbox restored from it.
   */
  async setDefaults(context: CommandContext, signal?: AbortSignal): Promise<void> {
    const reply = await this.#envd.request("POST", "/init", {
      json: {
        envVars: context.envVars,
        defaultUser: context.user,
        ...(context.workdir !== undefined && { defaultWorkdir: context.workdir }),
        timestamp: new Date().toISOString(),
      },
      timeoutMs: this.#callTimeoutMs,
      signal,
    });
    if (reply.status >= 300) {
      throw new WarrenError(
        "guest_unavailable",
        `envd /init failed: ${reply.status} ${replyExcerpt(reply)}`,
      );
    }
  }

  /**
   * Writes `data` to `path` in the guest as `user` (envd's `/files`, octet-stream), whole
   * within `timeoutMs` (a guest may read it one byte a second, or never). A stream is sent
   * as it is read (chunked), so an archive of any size costs the host no memory.
   */
  async upload(
    path: string,
    data: Uint8Array | Readable,
    user: string,
    options: { signal?: AbortSignal; timeoutMs: number },
  ): Promise<void> {
    const query = new URLSearchParams({ path, username: user });
    const reply = await this.#envd.request("POST", `/files?${query}`, {
      body: data,
      contentType: "application/octet-stream",
      user,
      ...options,
    });
    if (reply.status >= 300) {
      throw new WarrenError(
        "guest_unavailable",
        `upload of ${path} failed: ${reply.status} ${replyExcerpt(reply)}`,
      );
    }
  }
}

/**
 * bash as a login shell when the image has it (E2B runs build steps that way), else sh:
 * an Alpine image has no bash.
 */
function shellCommand(command: string, context: CommandContext) {
  const script =
    'if [ -x /bin/bash ]; then exec /bin/bash -l -c "$0"; else exec /bin/sh -l -c "$0"; fi';
  return {
    cmd: "/bin/sh",
    args: ["-c", script, command],
    envs: { ...context.envVars },
    ...(context.workdir !== undefined && { cwd: context.workdir }),
  };
}

function withTimeout(signal?: AbortSignal, timeoutMs?: number): AbortSignal | undefined {
  if (timeoutMs === undefined) return signal;
  const timeout = AbortSignal.timeout(timeoutMs);
  return signal ? AbortSignal.any([signal, timeout]) : timeout;
}

/** Bytes → lines, a partial line held until its end arrives. */
class LineSplitter {
  readonly #onLine: (line: string) => void;
  readonly #decoder = new TextDecoder();
  #partial = "";

  constructor(onLine: (line: string) => void) {
    this.#onLine = onLine;
  }

  push(bytes: Uint8Array): void {
    const text = this.#partial + this.#decoder.decode(bytes, { stream: true });
    const parts = text.split("\n");
    this.#partial = parts.pop() ?? "";
    if (this.#partial.length > MAX_LINE_CHARS) {
      parts.push(this.#partial);
      this.#partial = "";
    }
    for (const part of parts) this.#onLine(part.replace(/\r$/, ""));
  }

  flush(): void {
    if (this.#partial !== "") this.#onLine(this.#partial);
    this.#partial = "";
  }
}
