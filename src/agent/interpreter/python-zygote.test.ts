// Python kernels forked from the zygote (python-zygote.ts, kernels/python/warren_zygote.py) on
// this host's python3 with IPython: each fork its own cwd, environment, state and random
// seed; interrupts and kills reach the fork; a dead zygote is replaced and its kernels live
// on; a zygote that cannot start says why; nothing is left running.
import assert from "node:assert/strict";
import { execFile, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { promisify } from "node:util";
import { DriverKernel } from "./driver-kernel.js";
import type { KernelEvent } from "./kernel.js";
import { PythonZygote } from "./python-zygote.js";

const PYTHON = "/usr/bin/python3"; // Debian's, with python3-ipython (a pyenv python3 may come first on PATH)
const ZYGOTE = join(import.meta.dirname, "kernels", "python", "warren_zygote.py");
const hasIPython = spawnSync(PYTHON, ["-c", "import IPython"]).status === 0;
const hasNumpy = spawnSync(PYTHON, ["-c", "import numpy"]).status === 0;

/** Runs `code` and collects its events. */
async function run(kernel: DriverKernel, code: string): Promise<KernelEvent[]> {
  const events: KernelEvent[] = [];
  await kernel.execute(
    { code, env: {}, globals: {} },
    { emit: (event) => events.push(event) > 0, onDrain: () => {} },
  );
  return events;
}

/** The text of a run's main result, or its error. */
async function value(kernel: DriverKernel, code: string): Promise<string> {
  const events = await run(kernel, code);
  const error = events.find((e) => e.type === "error");
  if (error?.type === "error") return `${error.name}: ${error.value}`;
  const result = events.find((e) => e.type === "result" && e.main);
  return result?.type === "result" ? String(result.data["text/plain"]) : "";
}

/** Running: there and not a zombie (an orphan's reaper may be slow). */
const alive = (pid: number) => {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
};

describe("python zygote", {
  skip:
    !hasIPython &&
    "python3 with IPython is not installed on this host (apt-get install python3-ipython)",
}, () => {
  const root = realpathSync(mkdtempSync(join(tmpdir(), "warren-zygote-")));
  const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: root, LANG: "C.UTF-8" };
  const zygote = new PythonZygote([PYTHON, ZYGOTE], () => env, join(root, "run", "kernels.sock"));
  const kernels: DriverKernel[] = [];
  const pids: number[] = [];

  const fork = async (cwd: string, extra: Record<string, string> = {}) => {
    const kernel = new DriverKernel("python", zygote.fork(cwd, { ...env, ...extra }));
    kernels.push(kernel);
    await kernel.ready;
    const [pid, parent] = JSON.parse(await value(kernel, "import os; [os.getpid(), os.getppid()]"));
    pids.push(pid, parent);
    return { kernel, pid: pid as number, parent: parent as number };
  };

  after(async () => {
    for (const kernel of kernels) kernel.close();
    zygote.close();
    // Every process this test made (kernels and zygotes) is gone.
    for (let i = 0; i < 50 && pids.some(alive); i++) await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(pids.filter(alive), [], "no kernel or zygote left running");
    rmSync(root, { recursive: true, force: true });
  });

  it("forks each kernel from one zygote, with its own cwd, environment and state", async () => {
    const a = await fork(root, { ONLY_A: "a" });
    const b = await fork("/tmp");
    assert.equal(a.parent, b.parent, "both forked from the same zygote");
    assert.notEqual(a.pid, b.pid);
    assert.equal(await value(a.kernel, "import os; os.getcwd()"), `'${root}'`);
    assert.equal(await value(b.kernel, "import os; os.getcwd()"), "'/tmp'");
    assert.equal(await value(a.kernel, "os.environ.get('ONLY_A')"), "'a'");
    assert.equal(await value(b.kernel, "'ONLY_A' in os.environ"), "False");
    // Exactly the environment asked for, none of the zygote's own.
    const names = Object.keys(env)
      .sort()
      .map((name) => `'${name}'`);
    assert.equal(await value(b.kernel, "sorted(os.environ)"), `[${names.join(", ")}]`);
    // The cwd is the script directory's replacement on sys.path, as in a spawned kernel.
    assert.equal(await value(a.kernel, "import sys; sys.path[0]"), "''");
    await run(a.kernel, "shared = 1");
    assert.equal(await value(b.kernel, "shared"), "NameError: name 'shared' is not defined");
  });

  it("finds modules as a python started now would: PYTHONPATH's, and a user site made since", async () => {
    await fork(root); // the zygote is up before the directories exist
    const lib = join(root, "lib");
    const userSite = (
      await promisify(execFile)(PYTHON, ["-c", "import site; print(site.getusersitepackages())"], {
        env,
      })
    ).stdout.trim();
    for (const [dir, name] of [
      [lib, "from_pythonpath"],
      [userSite, "from_user_site"],
    ] as const) {
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, `${name}.py`), `where = ${JSON.stringify(name)}\n`);
    }
    const { kernel } = await fork(root, { PYTHONPATH: lib });
    assert.equal(
      await value(kernel, "import from_pythonpath; from_pythonpath.where"),
      "'from_pythonpath'",
    );
    assert.equal(
      await value(kernel, "import from_user_site; from_user_site.where"),
      "'from_user_site'",
    );
  });

  it("reseeds numpy in each fork: two kernels draw different numbers", {
    skip: !hasNumpy && "numpy is not installed",
  }, async () => {
    const [a, b] = [await fork(root), await fork(root)];
    const draw = "import numpy, random; [numpy.random.randint(1 << 30), random.getrandbits(30)]";
    const [fromA, fromB] = [await value(a.kernel, draw), await value(b.kernel, draw)];
    const [npA, pyA] = JSON.parse(fromA);
    const [npB, pyB] = JSON.parse(fromB);
    assert.notEqual(npA, npB, "numpy's global generator differs");
    assert.notEqual(pyA, pyB, "random's differs");
  });

  it("interrupts a forked kernel's run and kills it; the zygote forks the next one", async () => {
    const { kernel, pid, parent } = await fork(root);
    const busy = run(kernel, "while True: pass");
    await new Promise((r) => setTimeout(r, 300));
    kernel.interrupt();
    const events = await busy;
    assert.ok(
      events.some((e) => e.type === "error" && e.name === "KeyboardInterrupt"),
      JSON.stringify(events),
    );
    assert.equal(await value(kernel, "1 + 1"), "2", "the kernel lives on");
    kernel.close();
    assert.match(JSON.stringify(await run(kernel, "1")), /python kernel exited \(SIGKILL\)/);
    assert.equal(alive(pid), false);
    const next = await fork(root);
    assert.equal(next.parent, parent);
  });

  it("replaces a dead zygote; the kernels it forked live on", async () => {
    const old = await fork(root);
    await run(old.kernel, "kept = 42");
    process.kill(old.parent, "SIGKILL");
    for (let i = 0; i < 50 && alive(old.parent); i++) await new Promise((r) => setTimeout(r, 100));
    const fresh = await fork(root);
    assert.notEqual(fresh.parent, old.parent, "a new zygote");
    assert.equal(await value(old.kernel, "kept"), "42", "the orphaned kernel still runs");
    old.kernel.close();
    // Its exit is no longer reported by a zygote: the connection closing is the exit.
    const ended = await run(old.kernel, "1");
    assert.equal(ended[0]?.type, "error");
  });

  it("says why a zygote could not start, and leaves nothing running", async () => {
    const broken = new PythonZygote(
      [PYTHON, "-c", "import sys; sys.stderr.write('no IPython here\\n'); sys.exit(3)"],
      () => env,
      join(root, "run", "broken.sock"),
    );
    const kernel = new DriverKernel("python", broken.fork(root, env));
    await assert.rejects(
      kernel.ready,
      /python kernel could not start: the python zygote exited \(status 3\)[\s\S]*no IPython here/,
    );
    broken.close();
  });
});
