/**
 * Domain mode: a real node server in a network namespace of its own (it binds 443
 * there, as on a host of its own) with WARREN_DOMAIN set, and the e2b SDK configured the way
 * teams configure it for a self-hosted E2B: E2B_DOMAIN alone, trusting the CA Warren made.
 * The SDK's flows (sdk-flows.ts) run in a child process, whose environment is their whole
 * configuration; then the same flows on the plain-HTTP listener (E2B_API_URL/SANDBOX_URL).
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFile, stat } from "node:fs/promises";
import { request } from "node:https";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { leakCheck } from "../../helpers/leak-check.js";
import {
  addNetnsHost,
  type NetnsHost,
  netnsServerEnv,
  startServerIn,
} from "../../helpers/netns-host.js";
import { runEnv } from "../../helpers/run-env.js";
import type { TestServer } from "../../helpers/server.js";

const ROOT = join(import.meta.dirname, "..", "..", "..");
const DOMAIN = `${runEnv().networkPrefix}.warren.test`;
const PLAIN_PORT = 3000;
/** The flows sdk-flows.ts runs: all must pass (a child that ran none exits 0 too). */
const FLOWS = 10;

let host: NetnsHost;
let server: TestServer;
let caFile: string;

before(async () => {
  host = await addNetnsHost(0);
  const env: Record<string, string> = {
    ...netnsServerEnv(host, 1, "domains", PLAIN_PORT),
    WARREN_DOMAIN: DOMAIN,
    WARREN_TLS_PORT: "443",
    WARREN_POOL_SIZE: "1",
    // Background metrics every second: a past window of the flows has samples.
    WARREN_METRICS_INTERVAL_MS: "1000",
  };
  server = await startServerIn(host, env);
  caFile = join(env.WARREN_HOME as string, "tls", "ca.crt");
});

after(async () => {
  await server?.stop();
  await host?.remove();
  assert.deepEqual(await leakCheck(), [], "nothing of the server is left on the host");
});

/** Runs sdk-flows.ts with `env` as the SDK's configuration; its TAP output is echoed. */
function runFlows(mode: "domain" | "plain", env: Record<string, string>): Promise<string> {
  // Only what the flows need of ours: no E2B_* of this process leaks into theirs, nor the
  // test runner's own context (a child that sees it skips its tests and exits 0).
  const base = Object.fromEntries(
    Object.entries(process.env).filter(
      ([name]) => !name.startsWith("E2B_") && name !== "NODE_TEST_CONTEXT",
    ),
  );
  const child = spawn(
    process.execPath,
    [
      "--import",
      "tsx",
      "--import",
      join(ROOT, "test", "helpers", "resolve-domain.mjs"),
      "--test",
      "--test-reporter=tap",
      join(import.meta.dirname, "sdk-flows.ts"),
    ],
    {
      cwd: ROOT,
      env: {
        ...base,
        ...env,
        E2B_API_KEY: server.apiKey,
        WARREN_FLOWS_MODE: mode,
        WARREN_FLOWS_DOMAIN: DOMAIN,
        WARREN_TEST_RESOLVE_DOMAIN: DOMAIN,
        WARREN_TEST_RESOLVE_ADDRESS: host.address,
      },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let output = "";
  const collect = (chunk: Buffer) => {
    output += chunk.toString();
    process.stdout.write(chunk.toString().replace(/^/gm, `# [${mode}] `));
  };
  child.stdout.on("data", collect);
  child.stderr.on("data", collect);
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("exit", (code) => {
      const failed = output.split("\n").filter((line) => /^\s*not ok /.test(line));
      const passed = Number(/^# pass (\d+)$/m.exec(output)?.[1] ?? 0);
      if (code === 0 && passed >= FLOWS) resolve(output);
      else
        reject(
          new Error(
            `sdk-flows (${mode}) exited ${code} with ${passed} of ${FLOWS} flows passed: ${failed.join("; ")}`,
          ),
        );
    });
  });
}

describe("domain mode", () => {
  it("serves HTTPS for api.<domain> with a certificate from its own CA, whose key only root reads", async () => {
    assert.equal((await stat(join(caFile, "..", "ca.key"))).mode & 0o777, 0o600);
    assert.equal((await stat(join(caFile, "..", "server.key"))).mode & 0o777, 0o600);
    const ca = await readFile(caFile, "utf8");
    const status = await new Promise<number | undefined>((resolve, reject) => {
      const req = request(
        {
          host: host.address,
          port: 443,
          servername: `api.${DOMAIN}`,
          headers: { host: `api.${DOMAIN}` },
          path: "/health",
          ca,
        },
        (res) => {
          res.resume();
          resolve(res.statusCode);
        },
      );
      req.on("error", reject);
      req.end();
    });
    assert.equal(status, 200);
  });

  it("the SDK configured by E2B_DOMAIN alone: commands, ports, WebSocket, signed URLs, tokens, auto-resume, filesystem-only pause", async () => {
    await runFlows("domain", { E2B_DOMAIN: DOMAIN, NODE_EXTRA_CA_CERTS: caFile });
  });

  it("the same flows on plain HTTP (E2B_API_URL, E2B_SANDBOX_URL)", async () => {
    const url = `http://${host.address}:${PLAIN_PORT}`;
    await runFlows("plain", { E2B_API_URL: url, E2B_SANDBOX_URL: url });
  });
});
