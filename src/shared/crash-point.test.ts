import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, it } from "node:test";
import { crashSettings, makeCrashPoint } from "./crash-point.js";

const dir = await mkdtemp(join(tmpdir(), "warren-crash-point-"));
after(() => rm(dir, { recursive: true, force: true }));

/** Runs a module passing points a, b, a, c through the real `crashPoint`, with `env`. */
function runPoints(env: Record<string, string>) {
  const script = [
    `import { crashPoint } from ${JSON.stringify(join(import.meta.dirname, "crash-point.ts"))};`,
    `for (const p of ["a", "b", "a", "c"]) crashPoint(p);`,
    `console.log("finished");`,
  ].join("\n");
  return spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
    env: { ...process.env, WARREN_CRASH_AT: "", WARREN_CRASH_TRACE: "", ...env },
    encoding: "utf8",
  });
}

it("settings: point and pass (default 1), trace file; a bad point is refused naming the variable", () => {
  assert.deepEqual(crashSettings({}), {});
  assert.deepEqual(crashSettings({ WARREN_CRASH_AT: "lifecycle.pause.after-capture" }), {
    at: { point: "lifecycle.pause.after-capture", pass: 1 },
  });
  assert.deepEqual(crashSettings({ WARREN_CRASH_AT: "x.y:3", WARREN_CRASH_TRACE: "/t" }), {
    at: { point: "x.y", pass: 3 },
    trace: "/t",
  });
  for (const bad of ["x:0", "x:", "X", "a b", ":2"]) {
    assert.throws(() => crashSettings({ WARREN_CRASH_AT: bad }), /WARREN_CRASH_AT/);
  }
});

it("unset: a point does nothing", () => {
  const point = makeCrashPoint({});
  point("a");
  const run = runPoints({});
  assert.equal(run.status, 0);
  assert.equal(run.stdout.trim(), "finished");
});

it("dies by SIGKILL at the named pass, after tracing every point passed until then", async () => {
  const trace = join(dir, "trace");
  const run = runPoints({ WARREN_CRASH_AT: "a:2", WARREN_CRASH_TRACE: trace });
  assert.equal(run.signal, "SIGKILL");
  assert.equal(run.stdout, "", "nothing after the point ran");
  assert.match(run.stderr, /crash point a:2/);
  assert.equal(await readFile(trace, "utf8"), "a\nb\na\n");
});

it("trace alone: every point, appended, and the process lives on", async () => {
  const trace = join(dir, "trace-only");
  assert.equal(runPoints({ WARREN_CRASH_TRACE: trace }).status, 0);
  assert.equal(runPoints({ WARREN_CRASH_AT: "c:2", WARREN_CRASH_TRACE: trace }).status, 0);
  assert.equal(await readFile(trace, "utf8"), "a\nb\na\nc\n".repeat(2));
});
