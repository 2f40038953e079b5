// Custom templates measured through the real e2b SDK, in one run: a build cold (every step
// runs), cached (nothing changed) and forced (skipCache); create → first command from the
// custom template vs from `base` (goal: equal); and bursts of 16 concurrent creates of the
// custom template, the first on a cold pool and later ones once the pool has adapted to the
// demand (goal: p50 first command ≤ 2× the sequential figure).
// Run: npm run bench:templates (as root; the server is started and stopped by the bench).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox, Template, waitForPort } from "e2b";
import { startServer } from "../test/helpers/server.js";
import { report, type Summary, summarize } from "./lib/report.js";

const N = Number(process.env.BENCH_CREATES ?? 10);
const BURST = Number(process.env.BENCH_BURST ?? 16);
const BURSTS = Number(process.env.BENCH_BURSTS ?? 3);
const rows: Summary[] = [];
const extra: Record<string, unknown> = {};
const since = (t: number) => performance.now() - t;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const REQUEST_TIMEOUT_MS = 300_000;

const context = mkdtempSync(join(tmpdir(), "warren-bench-build-"));
mkdirSync(join(context, "app"));
for (let i = 0; i < 20; i++)
  writeFileSync(join(context, "app", `file-${i}.txt`), `${i}\n`.repeat(1000));

function template(skip = false) {
  const t = Template({ fileContextPath: context }).fromBaseImage();
  return (skip ? t.skipCache() : t)
    .copy("app", "/home/user/app")
    .runCmd("python3 -c 'import json; print(json.dumps({\"ok\": 1}))' > /home/user/app/ok.json")
    .runCmd("echo prepared > /opt/prepared", { user: "root" })
    .setWorkdir("/home/user/app")
    .setEnvs({ BENCH: "1" })
    .setStartCmd("python3 -m http.server 8080", waitForPort(8080));
}

async function timedBuild(label: string, skipCache: boolean): Promise<void> {
  const t = performance.now();
  await Template.build(template(skipCache), "bench-env", { skipCache });
  rows.push(summarize(label, "ms", [since(t)]));
}

async function createUntilCommand(name: string): Promise<[Sandbox, number]> {
  const t = performance.now();
  const sandbox = await Sandbox.create(name, { requestTimeoutMs: REQUEST_TIMEOUT_MS });
  await sandbox.commands.run("true", { timeoutMs: REQUEST_TIMEOUT_MS });
  return [sandbox, since(t)];
}

async function sequential(name: string): Promise<void> {
  const samples: number[] = [];
  for (let i = 0; i < N; i++) {
    const [sandbox, ms] = await createUntilCommand(name);
    samples.push(ms);
    await sandbox.kill();
    await sleep(2_000); // the pool's refill, as between an RL worker's episodes
  }
  rows.push(summarize(`create → command, sequential: ${name}`, "ms", samples));
}

async function burst(label: string): Promise<void> {
  const results = await Promise.all(
    Array.from({ length: BURST }, () => createUntilCommand("bench-env")),
  );
  rows.push(
    summarize(
      label,
      "ms",
      results.map((r) => r[1]),
    ),
  );
  await Promise.all(results.map(([s]) => s.kill()));
}

const server = await startServer();
try {
  await timedBuild("build: cold (every step runs)", false);
  await timedBuild("build: cached (nothing changed)", false);
  await timedBuild("build: forced (skipCache)", true);

  await sequential("base");
  await sequential("bench-env");
  for (let i = 1; i <= BURSTS; i++) {
    await burst(`burst of ${BURST} creates → command: bench-env, burst ${i}`);
    await sleep(15_000); // time for the pool to grow toward the demand it saw
  }
  const res = await fetch(`${server.url}/health`, {
    headers: { "x-admin-token": server.adminToken },
  });
  const health = (await res.json()) as Record<string, unknown>;
  extra.pooledVmmsAtEnd = health.pooledVmms;
} finally {
  await server.stop();
  rmSync(context, { recursive: true, force: true });
}

const p50 = (name: string) => rows.find((r) => r.name === name)?.p50 ?? Number.NaN;
const ratio = (a: number, b: number) => Math.round((a / b) * 1000) / 1000;
const customSeq = p50("create → command, sequential: bench-env");
extra.ratios = {
  customOverBase: ratio(customSeq, p50("create → command, sequential: base")),
  cachedOverColdBuild: ratio(
    p50("build: cached (nothing changed)"),
    p50("build: cold (every step runs)"),
  ),
  lastBurstP50OverSequential: ratio(
    p50(`burst of ${BURST} creates → command: bench-env, burst ${BURSTS}`),
    customSeq,
  ),
  firstBurstP50OverSequential: ratio(
    p50(`burst of ${BURST} creates → command: bench-env, burst 1`),
    customSeq,
  ),
};
report("templates", rows, extra);
