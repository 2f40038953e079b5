// Runs commands inside a run sandbox (test/helpers/run-sandbox.ts): a data dir made for
// the run, a network prefix and an IPv4 block no one else on the host uses, and guest
// images in the test cache. Used by the e2e tier (scripts/test.mjs) and the benchmarks
// (scripts/bench.mjs), so neither touches a Warren server running on the same host. The
// sandbox is removed when the run ends, also on failure, Ctrl-C or SIGTERM.
import { spawn } from "node:child_process";
import { join } from "node:path";

// A Ctrl-C reaches every process of the terminal's group; the test runner and the servers
// then stop their VMs. After this long the rest is killed.
const STOP_GRACE_MS = 60_000;

let current;
let stopping = false;

/** True once SIGINT or SIGTERM arrived: start nothing more, clean up, exit non-zero. */
export function isStopping() {
  return stopping;
}

for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    process.stderr.write(`${signal}: stopping, then cleaning up\n`);
    // A SIGTERM sent to this process alone is passed on (Ctrl-C reaches the group anyway).
    if (signal === "SIGTERM") current?.kill("SIGTERM");
    setTimeout(() => current?.kill("SIGKILL"), STOP_GRACE_MS).unref();
  });
}

/** Runs `node <args>` in `root` with `env`; resolves with its exit code (1 if killed). */
export function runNode(root, args, env) {
  return new Promise((resolve) => {
    current = spawn(process.execPath, args, { stdio: "inherit", cwd: root, env });
    current.once("exit", (code, signal) => {
      current = undefined;
      resolve(code ?? (signal ? 1 : 0));
    });
  });
}

/**
 * The environment of what runs in the sandbox: server settings (WARREN_*) from the caller's
 * shell are dropped, so that test servers get only what the tests set; WARREN_ACCEL and
 * the WARREN_TEST_* knobs stay.
 */
function sandboxEnvironment(extra) {
  const keep = (key) =>
    !key.startsWith("WARREN_") || key === "WARREN_ACCEL" || key.startsWith("WARREN_TEST_");
  const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => keep(key)));
  return { ...env, ...extra };
}

/**
 * Creates a run sandbox, sets the host up (Debian packages and guest images, unless
 * `hostSetup` is false), calls `body(env)` with the environment to run things with, and
 * removes the sandbox. Resolves with body's exit code (1 when setup failed).
 */
export async function inRunSandbox(root, { hostSetup = true, label = "run" }, body) {
  const { register } = await import("tsx/esm/api");
  register();
  const sandbox = await import("../test/helpers/run-sandbox.ts");
  const run = await sandbox.createRunSandbox();
  process.stderr.write(
    `${label}: data dir ${run.dataDir}, network prefix ${run.networkPrefix}, block ${run.networkCidr}, images in ${run.imagesDir}\n`,
  );
  const env = sandboxEnvironment(sandbox.runEnvVars(run));
  try {
    if (hostSetup) {
      // Once per run (the first time ~4 min), so that every file finds the images ready,
      // even one that only needs QEMU's tools.
      const setup = await runNode(
        root,
        [join(root, "scripts", "setup.mjs"), "--images-dir", run.imagesDir],
        { ...env, WARREN_HOME: run.dataDir },
      );
      if (setup !== 0) return 1;
    }
    return stopping ? 1 : await body(env);
  } finally {
    const left = await sandbox.removeRunSandbox(run);
    process.stderr.write(`${label}: removed ${run.dataDir}${sandbox.summary(left)}\n`);
  }
}
