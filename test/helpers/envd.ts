import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { chown, mkdir, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { after, before, type TestContext } from "node:test";
import { fileURLToPath } from "node:url";
import { Sandbox } from "e2b";
import { ENVD_PORT } from "../../src/protocol/index.js";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const ENVD_BUNDLE = join(root, "dist", "agent", "envd.mjs");
export const TEST_USER = "user";

/** The E2B SDK's debug mode talks to localhost:49983: the envd these tests start. */
process.env.E2B_DEBUG = "true";

/** Tests run as root and need the `user` account E2B templates have. */
export function ensureTestUser(): void {
  try {
    execFileSync("id", [TEST_USER], { stdio: "ignore" });
  } catch {
    execFileSync("useradd", ["--create-home", "--shell", "/bin/bash", TEST_USER], {
      stdio: "inherit",
    });
  }
}

/** uid and gid of the test `user` account (created when missing). */
export function testUserIds(): { uid: number; gid: number } {
  ensureTestUser();
  return {
    uid: Number(execFileSync("id", ["-u", TEST_USER]).toString()),
    gid: Number(execFileSync("id", ["-g", TEST_USER]).toString()),
  };
}

/** A fresh directory under the test user's home, owned by it, removed when the test ends. */
export async function userWorkdir(t: TestContext): Promise<string> {
  const { uid, gid } = testUserIds();
  const dir = `/home/${TEST_USER}/t-${randomUUID().slice(0, 8)}`;
  await mkdir(dir);
  await chown(dir, uid, gid);
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

export interface RunningEnvd {
  readonly url: string;
  readonly process: ChildProcess;
  /** Output the agent printed so far (for failure messages). */
  output(): string;
  /** POST /init as the orchestrator would. */
  init(body: Record<string, unknown>, token?: string): Promise<Response>;
  stop(): Promise<void>;
}

/**
 * Starts the bundled agent (the artifact that goes into guests) and waits for /health.
 * The SDK's debug mode expects port 49983; WARREN_TEST_ENVD_PORT moves it (and points the
 * SDK there through E2B_SANDBOX_URL) so two test files can run side by side while developing.
 * `address`: another loopback address to listen on, on envd's own port, as a guest's envd
 * answers the host (for the orchestrator's client, which always calls that port).
 */
export async function startEnvd(options: { address?: string } = {}): Promise<RunningEnvd> {
  const address = options.address ?? "127.0.0.1";
  const port = options.address ? ENVD_PORT : Number(process.env.WARREN_TEST_ENVD_PORT ?? ENVD_PORT);
  const url = `http://${address}:${port}`;
  if (port !== ENVD_PORT) process.env.E2B_SANDBOX_URL = url;
  if (process.getuid?.() !== 0)
    throw new Error("envd tests must run as root (they run processes as other users)");
  if (!existsSync(ENVD_BUNDLE)) throw new Error(`${ENVD_BUNDLE} is missing: run npm run build`);
  ensureTestUser();
  const busy = await fetch(`${url}/health`).then(
    () => true,
    () => false,
  );
  if (busy) throw new Error(`port ${port} is already in use: stop the envd running there first`);
  let output = "";
  const child = spawn(process.execPath, [ENVD_BUNDLE, "--port", String(port), "--host", address], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout?.on("data", (d: Buffer) => {
    output += d.toString();
  });
  child.stderr?.on("data", (d: Buffer) => {
    output += d.toString();
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`envd exited with ${child.exitCode}: ${output}`);
    const res = await fetch(`${url}/health`).catch(() => undefined);
    if (res?.status === 204) break;
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`envd did not become healthy within 15 s: ${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return {
    url,
    process: child,
    output: () => output,
    init: (body, token) =>
      fetch(`${url}/init`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          ...(token ? { "x-access-token": token } : {}),
        },
        body: JSON.stringify(body),
      }),
    async stop() {
      if (child.exitCode === null) {
        child.kill("SIGTERM");
        const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
        await exited;
        clearTimeout(timer);
      }
    },
  };
}

/**
 * The agent and the SDK's debug-mode sandbox on it for the calling suite: started before its
 * tests, the agent stopped after them.
 */
export function useAgentSandbox(): { readonly env: RunningEnvd; readonly sbx: Sandbox } {
  let env: RunningEnvd | undefined;
  let sbx: Sandbox | undefined;
  before(async () => {
    env = await startEnvd();
    sbx = await Sandbox.create();
  });
  after(async () => {
    await env?.stop();
  });
  const started = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error("the agent has not started");
    return value;
  };
  return {
    get env() {
      return started(env);
    },
    get sbx() {
      return started(sbx);
    },
  };
}
