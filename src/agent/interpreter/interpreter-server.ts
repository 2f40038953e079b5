import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { readBounded } from "../../shared/index.js";
import { type Context, type Contexts, InterpreterError } from "./contexts.js";
import type { EventSink, KernelEvent } from "./kernel.js";
import { executionLine } from "./results.js";

/** Largest request body: a cell of code with its env vars. */
const MAX_BODY_BYTES = 16 * 1024 * 1024;
/** A line every 5 s keeps proxies from timing out and shows a client that went away. */
const KEEPALIVE_MS = 5_000;
/** How long an interrupted run may take to end before its kernel is killed (its state lost). */
const INTERRUPT_GRACE_MS = 10_000;
/** An idle client connection is kept this long (as envd's own server: agent/server.ts). */
const KEEP_ALIVE_MS = 640_000;

export interface InterpreterOptions {
  readonly contexts: Contexts;
  /** The sandbox's env vars now (envd's `/init`), set in a kernel at each run. */
  readonly globals: () => Record<string, string>;
  /**
   * Whether a presented `X-Access-Token` is envd's (true for any when the sandbox has none):
   * a secure sandbox runs no one's code without it. Default: every caller.
   */
  readonly authorize?: (presented: string | undefined) => boolean;
}

export interface Interpreter {
  readonly server: Server;
  /** Settles once the default contexts started (or failed to: `/health` says which). */
  readonly started: Promise<void>;
}

/**
 * The code interpreter's HTTP server, speaking what `@e2b/code-interpreter` sends to port
 * 49999 (docs/code-interpreter-wire.md): `/execute` streaming JSON lines, `/contexts`, `/health`;
 * and Warren's `/warm`.
 * Errors are text bodies with the status, as E2B's server answers (the SDKs show the text).
 */
export function createInterpreter(options: InterpreterOptions): Interpreter {
  const { contexts } = options;
  let health: { status: number; body: string } = { status: 503, body: '"starting"' };
  const started = contexts.startDefaults().then(
    () => {
      health = { status: 200, body: '"OK"' };
    },
    (err: Error) => {
      health = { status: 500, body: JSON.stringify(`default contexts failed: ${err.message}`) };
    },
  );
  const server = createServer((req, res) => {
    route(req, res).catch((err: unknown) => {
      const status = err instanceof InterpreterError ? err.status : 500;
      const message = err instanceof Error ? err.message : String(err);
      if (!res.headersSent) {
        res.writeHead(status, {
          "content-type": "text/plain; charset=utf-8",
          ...(status === 401 && { "cache-control": "no-store" }),
        });
        res.end(message);
      } else res.destroy();
    });
  });
  server.requestTimeout = 0;
  // Longer than the proxy keeps a pooled connection (620 s): with Node's 5 s, a request the
  // proxy sent on a connection just as envd closed it failed with ECONNRESET (502).
  server.keepAliveTimeout = KEEP_ALIVE_MS;

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? "/").split("?")[0] ?? "/";
    const method = req.method ?? "GET";
    const contextPath = /^\/contexts\/([^/]+)(\/restart)?$/.exec(path);
    if (method === "GET" && path === "/health") return json(res, health.status, health.body);
    // Fixed code, no caller's: the capture and the warm pool call it before /init's token.
    if (method === "POST" && path === "/warm") return warm(res);
    checkAccess(options, req, path === "/execute");
    if (method === "POST" && path === "/execute") return execute(options, req, res);
    if (method === "GET" && path === "/contexts")
      return json(res, 200, JSON.stringify(contexts.list()));
    if (method === "POST" && path === "/contexts") {
      const body = await readJson(req);
      const context = await contexts.create(
        optionalString(body, "language"),
        optionalString(body, "cwd"),
      );
      return json(res, 200, JSON.stringify(context.info()));
    }
    if (contextPath) {
      const id = decodeURIComponent(contextPath[1] as string);
      if (method === "DELETE" && !contextPath[2]) {
        contexts.remove(id);
        return json(res, 200, "null");
      }
      if (method === "POST" && contextPath[2]) {
        await contexts.restart(id);
        return json(res, 200, "null");
      }
    }
    res.writeHead(404, { "content-type": "text/plain; charset=utf-8" });
    res.end(`Not Found: ${method} ${path}`);
  }

  /**
   * Warren's own (not E2B's): runs `1 + 1` silently in the python and javascript defaults,
   * so that a restored VM's first user run finds their paths translated (under TCG) and the
   * execution counts where a fresh kernel has them. Fixed code: nothing a caller sends runs.
   */
  async function warm(res: ServerResponse): Promise<void> {
    await started;
    for (const language of WARMED_LANGUAGES) {
      const context = await contexts.defaultFor(language);
      await context.serial((kernel) =>
        kernel.execute(
          { code: "1 + 1", env: {}, globals: options.globals(), silent: true },
          DISCARD,
        ),
      );
    }
    res.writeHead(204).end();
  }

  return { server, started };
}

/**
 * envd's token, as the SDKs send it (docs/code-interpreter-wire.md §1.4): required to run
 * code; on the contexts' routes only checked when sent, since the released JS SDK (2.8.0)
 * sends none there and they run nothing of the caller's.
 */
function checkAccess(options: InterpreterOptions, req: IncomingMessage, required: boolean): void {
  if (!options.authorize) return;
  const presented = req.headers["x-access-token"];
  const token = Array.isArray(presented) ? undefined : presented;
  if (token === undefined && !required) return;
  if (!options.authorize(token)) throw new InterpreterError(401, "Unauthorized");
}

/** `POST /execute`: runs the code in its context, streaming its events as NDJSON. */
async function execute(
  options: InterpreterOptions,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const { contexts } = options;
  const body = await readJson(req);
  if (typeof body.code !== "string") throw new InterpreterError(400, "code must be a string");
  const contextId = optionalString(body, "context_id");
  const language = optionalString(body, "language");
  const env = stringMap(body.env_vars, "env_vars");
  if (contextId != null && language != null)
    throw new InterpreterError(400, "Only one of context_id or language can be provided");
  const context: Context =
    contextId != null ? contexts.get(contextId) : await contexts.defaultFor(language);
  res.writeHead(200, { "content-type": "application/x-ndjson" });
  res.flushHeaders();
  const stream = new ExecutionStream(res);
  const code = body.code;
  const run = context.serial(async (kernel) => {
    if (stream.gone) return; // the client left while waiting its turn
    let grace: NodeJS.Timeout | undefined;
    stream.onGone = () => {
      kernel.interrupt();
      grace = setTimeout(() => kernel.close(), INTERRUPT_GRACE_MS);
    };
    try {
      await kernel.execute({ code, env, globals: options.globals() }, stream);
    } finally {
      clearTimeout(grace);
      stream.onGone = undefined;
    }
  });
  // Headers are out: a kernel that could not be started again is the run's error line.
  await run.catch((err: Error) =>
    stream.emit({ type: "error", name: "KernelStartFailed", value: err.message, traceback: "" }),
  );
  stream.end();
}

const WARMED_LANGUAGES = ["python", "javascript"] as const;

/** A warm-up's events: nobody reads them. */
const DISCARD: EventSink = { emit: () => true, onDrain: () => {} };

/** `/execute`'s answer: one JSON line per event, keepalives while quiet, then the end line. */
class ExecutionStream implements EventSink {
  gone = false;
  onGone: (() => void) | undefined;
  readonly #res: ServerResponse;
  readonly #keepalive: NodeJS.Timeout;

  constructor(res: ServerResponse) {
    this.#res = res;
    this.#keepalive = setInterval(() => this.#write({ type: "keepalive" }), KEEPALIVE_MS);
    res.on("close", () => {
      clearInterval(this.#keepalive);
      if (res.writableFinished) return;
      this.gone = true;
      this.onGone?.();
    });
  }

  emit(event: KernelEvent): boolean {
    return this.#write(executionLine(event));
  }

  onDrain(resume: () => void): void {
    if (this.gone) resume();
    else this.#res.once("drain", resume).once("close", resume);
  }

  end(): void {
    clearInterval(this.#keepalive);
    if (this.gone) return;
    this.#write({ type: "end_of_execution" });
    this.#res.end();
  }

  #write(line: Record<string, unknown>): boolean {
    if (this.gone) return true;
    return this.#res.write(`${JSON.stringify(line)}\n`);
  }
}

function json(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(body);
}

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const text = (
    await readBounded(req, MAX_BODY_BYTES, {
      tooLarge: () => new InterpreterError(400, `request body over ${MAX_BODY_BYTES} bytes`),
    })
  ).toString("utf8");
  if (text.trim() === "") return {};
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (err) {
    throw new InterpreterError(400, `request body is not JSON: ${(err as Error).message}`);
  }
  if (typeof body !== "object" || body === null || Array.isArray(body))
    throw new InterpreterError(400, "request body must be a JSON object");
  return body as Record<string, unknown>;
}

/** A string field, or undefined when absent or null (the Python SDK sends nulls). */
function optionalString(body: Record<string, unknown>, key: string): string | undefined {
  const value = body[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") throw new InterpreterError(400, `${key} must be a string`);
  return value;
}

function stringMap(value: unknown, key: string): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value))
    throw new InterpreterError(400, `${key} must be an object of strings`);
  for (const [k, v] of Object.entries(value)) {
    if (typeof v !== "string") throw new InterpreterError(400, `${key}.${k} must be a string`);
  }
  return value as Record<string, string>;
}
