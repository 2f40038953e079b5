import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before } from "node:test";
import type { Sandbox } from "e2b";
import { leakCheck, vmLeftovers } from "./leak-check.js";
import { runEnv, runServerEnv } from "./run-env.js";

const ROOT = join(import.meta.dirname, "..", "..");
/** First start on a fresh machine sets the host up and builds the base template. */
const READY_TIMEOUT_MS = 20 * 60_000;

export interface LogLine {
  readonly msg?: string;
  readonly level?: number;
  readonly [key: string]: unknown;
}

export interface TestServer {
  readonly url: string;
  /** The default team's key (the key file's first). */
  readonly apiKey: string;
  /** The admin token (`X-Admin-Token`, or a bearer token on `/metrics`). */
  readonly adminToken: string;
  readonly dataDir: string;
  readonly process: ChildProcess;
  /** Every JSON log line so far (the server logs with pino on stdout). */
  readonly logs: LogLine[];
  /** SIGTERM and wait for the exit (the server pauses running sandboxes first). */
  stop(): Promise<number | null>;
}

/**
 * Starts the real node server (the bundle `npm start` runs, built by the test command) on
 * an ephemeral port, waits until it is ready, and points the e2b SDK at it through the same
 * environment variables a user sets: E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY. The
 * server lives in the run's sandbox (run-env.ts): the run's data dir, the test images, the
 * run's network prefix and block; `env` adds settings (or overrides those). `sdkEnv: false`
 * leaves the SDK's variables alone (a cluster's node: the SDK talks to the gateway).
 */
export async function startServer(
  env: Record<string, string> = {},
  options: { wrap?: readonly string[]; sdkEnv?: boolean; entry?: readonly string[] } = {},
): Promise<TestServer> {
  const settings: Record<string, string> = { WARREN_PORT: "0", ...runServerEnv(), ...env };
  const dataDir = settings.WARREN_HOME ?? runEnv().dataDir;
  // `wrap`: a command that execs the rest in place (a network namespace), same pid.
  // `entry`: instead of the bundle, another entry point (a benchmark's).
  const argv = [
    ...(options.wrap ?? []),
    ...(options.entry ?? [
      process.execPath,
      "--enable-source-maps",
      join(ROOT, "dist", "server", "main.mjs"),
    ]),
  ];
  const child = spawn(argv[0] ?? process.execPath, argv.slice(1), {
    cwd: ROOT,
    env: { ...process.env, ...settings },
    stdio: ["ignore", "pipe", "pipe"],
  });
  // A test or bench that dies must not leave its server (and its VMs) running.
  const orphanGuard = () => {
    if (child.exitCode === null) child.kill("SIGTERM");
  };
  process.once("exit", orphanGuard);
  child.once("exit", () => process.off("exit", orphanGuard));
  const logs: LogLine[] = [];
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    let listening: string | undefined;
    const timer = setTimeout(
      () => reject(new Error(`server not ready in ${READY_TIMEOUT_MS} ms\n${stderr.slice(-3000)}`)),
      READY_TIMEOUT_MS,
    );
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on("line", (line) => {
      let entry: LogLine;
      try {
        entry = JSON.parse(line) as LogLine;
      } catch {
        return;
      }
      logs.push(entry);
      if (process.env.WARREN_TEST_SERVER_LOG) process.stderr.write(`${line}\n`);
      if (entry.msg === "server.listening") listening = entry.url as string;
      if (entry.msg === "server.ready" && listening) {
        clearTimeout(timer);
        resolve(listening);
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      const tail = logs
        .slice(-10)
        .map((l) => JSON.stringify(l))
        .join("\n");
      reject(
        new Error(`server exited (${code}) before it was ready\n${tail}\n${stderr.slice(-3000)}`),
      );
    });
  });
  const apiKey = (await readFile(join(dataDir, "secrets", "api-key"), "utf8")).split("\n")[0] ?? "";
  const adminToken =
    settings.WARREN_ADMIN_TOKEN ??
    (await readFile(join(dataDir, "secrets", "admin-token"), "utf8")).trim();
  if (options.sdkEnv !== false) {
    process.env.E2B_API_URL = url;
    process.env.E2B_SANDBOX_URL = url;
    process.env.E2B_API_KEY = apiKey;
    delete process.env.E2B_DEBUG;
  }
  return {
    url,
    apiKey,
    adminToken,
    dataDir,
    process: child,
    logs,
    async stop() {
      if (child.exitCode === null) child.kill("SIGTERM");
      return exited;
    },
  };
}

/** Polls `check` every 250 ms until it holds; fails the test naming `what` after `timeoutMs`. */
export async function waitFor(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  assert.fail(`timed out waiting for ${what}`);
}

/** Runs a command in the sandbox (as `user`, else its default user) and gives its trimmed stdout. */
export function commandOutput(sandbox: Sandbox) {
  return async (cmd: string, user?: string): Promise<string> =>
    (await sandbox.commands.run(cmd, { user })).stdout.trim();
}

/** A raw API call with the key (for what the SDK cannot send: bad bodies, wrong types). */
export async function api(
  server: TestServer,
  method: string,
  path: string,
  body?: string | object,
  headers: Record<string, string> = {},
): Promise<{
  status: number;
  body: Record<string, unknown> | unknown[] | undefined;
  headers: Headers;
}> {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: {
      "x-api-key": server.apiKey,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
      ...headers,
    },
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return {
    status: res.status,
    body: text ? (JSON.parse(text) as Record<string, unknown>) : undefined,
    headers: res.headers,
  };
}

/**
 * A server for this test file: started before its tests, stopped after them, then checked
 * to have left nothing behind (no slot, veth or rule of the run; no VMM or runtime dir).
 */
export function useServer(env: Record<string, string> = {}): TestServer {
  let started: TestServer | undefined;
  const server = (): TestServer => {
    if (!started) throw new Error("the test server has not started");
    return started;
  };
  before(async () => {
    started = await startServer(env);
  });
  after(async () => {
    assert.equal(await server().stop(), 0, "the server exits cleanly");
    assert.deepEqual(await leakCheck(), [], "no slot, veth or rule left behind");
    assert.deepEqual(
      await vmLeftovers(`${server().dataDir}/run`),
      [],
      "no VMM or runtime dir left",
    );
  });
  return {
    get url() {
      return server().url;
    },
    get apiKey() {
      return server().apiKey;
    },
    get adminToken() {
      return server().adminToken;
    },
    get dataDir() {
      return server().dataDir;
    },
    get process() {
      return server().process;
    },
    get logs() {
      return server().logs;
    },
    stop: () => server().stop(),
  };
}
