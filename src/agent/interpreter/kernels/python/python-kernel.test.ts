import assert from "node:assert/strict";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable, Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";

// The Python kernel driver (warren_kernel.py) driven over kernels/PROTOCOL.md, as envd does.

const DRIVER = fileURLToPath(new URL("./warren_kernel.py", import.meta.url));
const RUN_TIMEOUT_MS = 30_000;

type KernelEvent = { readonly type: string; readonly id?: string } & Readonly<
  Record<string, unknown>
>;
type Bundle = Readonly<Record<string, unknown>>;
// Chart values are checked field by field; `any` keeps those checks readable.
// biome-ignore lint/suspicious/noExplicitAny: a parsed e2b/chart value
type Chart = any;

interface RunOptions {
  readonly env?: Record<string, string>;
  readonly globals?: Record<string, string>;
  readonly silent?: boolean;
}

/** One driver process: requests on its fd 0, events from its fd 3. */
class Kernel {
  readonly child: ChildProcess;
  /** Every event, in arrival order. */
  readonly events: KernelEvent[] = [];
  readonly ready: Promise<void>;
  #nextId = 1;
  #partial = "";
  #listeners = new Set<() => void>();
  #diagnostics = "";

  constructor(python: string, cwd: string, home: string) {
    this.child = spawn(python, [DRIVER], {
      cwd,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: home, LANG: "C.UTF-8" },
      stdio: ["pipe", "pipe", "pipe", "pipe"],
    });
    for (const out of [this.child.stdout, this.child.stderr]) {
      out?.on("data", (chunk: Buffer) => {
        this.#diagnostics = (this.#diagnostics + chunk.toString()).slice(-4000);
      });
    }
    const events = this.child.stdio[3] as Readable;
    events.setEncoding("utf8");
    events.on("data", (chunk: string) => this.#receive(chunk));
    this.child.on("exit", () => this.#notify());
    this.ready = this.waitFor((e) => e.type === "ready", 60_000).then(() => {});
  }

  /** The id the next run() gets. */
  get nextId(): string {
    return String(this.#nextId);
  }

  /** Sends an execute request; resolves with its events once `done` came. */
  async run(code: string, options: RunOptions = {}): Promise<Run> {
    const id = String(this.#nextId++);
    const request = {
      type: "execute",
      id,
      code,
      env: options.env ?? {},
      globals: options.globals ?? {},
    };
    (this.child.stdin as Writable).write(
      `${JSON.stringify({ ...request, silent: options.silent === true })}\n`,
    );
    await this.waitFor((e) => e.type === "done" && e.id === id, RUN_TIMEOUT_MS);
    return new Run(this.events.filter((e) => e.id === id));
  }

  /** The first event (past or future) that matches. */
  waitFor(match: (event: KernelEvent) => boolean, timeoutMs: number): Promise<KernelEvent> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const found = this.events.find(match);
        if (found) return finish(() => resolve(found));
        if (this.child.exitCode !== null || this.child.signalCode !== null) {
          finish(() => reject(new Error(`the driver exited: ${this.#diagnostics}`)));
        }
      };
      const timer = setTimeout(
        () =>
          finish(() => reject(new Error(`no such event in ${timeoutMs} ms: ${this.#diagnostics}`))),
        timeoutMs,
      );
      const finish = (settle: () => void) => {
        clearTimeout(timer);
        this.#listeners.delete(check);
        settle();
      };
      this.#listeners.add(check);
      check();
    });
  }

  interrupt(): void {
    this.child.kill("SIGINT");
  }

  /** Closes fd 0, as envd does; resolves with the exit status. */
  async close(): Promise<number | null> {
    if (this.child.exitCode !== null) return this.child.exitCode;
    const exited = new Promise<number | null>((resolve) =>
      this.child.once("exit", (code) => resolve(code)),
    );
    this.child.stdin?.end();
    const timer = setTimeout(() => this.child.kill("SIGKILL"), 10_000);
    const code = await exited;
    clearTimeout(timer);
    return code;
  }

  #receive(chunk: string): void {
    const lines = (this.#partial + chunk).split("\n");
    this.#partial = lines.pop() ?? "";
    for (const line of lines) this.events.push(JSON.parse(line) as KernelEvent);
    this.#notify();
  }

  #notify(): void {
    for (const listener of [...this.#listeners]) listener();
  }
}

/** The events of one execution, `done` last. */
class Run {
  constructor(readonly events: readonly KernelEvent[]) {}

  get count(): unknown {
    return this.events.find((e) => e.type === "execution_count")?.count;
  }
  get stdout(): string {
    return this.#text("stdout");
  }
  get stderr(): string {
    return this.#text("stderr");
  }
  get error(): KernelEvent | undefined {
    return this.events.find((e) => e.type === "error");
  }
  get results(): { main: boolean; data: Bundle }[] {
    return this.events
      .filter((e) => e.type === "result")
      .map((e) => ({ main: e.main as boolean, data: e.data as Bundle }));
  }
  /** The text/plain of the cell's value. */
  get text(): unknown {
    return this.results.find((r) => r.main)?.data["text/plain"];
  }
  chart(): Chart {
    const chart = this.results[0]?.data["e2b/chart"];
    assert.ok(chart, `no chart in ${JSON.stringify(this.events).slice(0, 2000)}`);
    return chart;
  }
  /** Fails with what the cell said when it raised. */
  ok(): this {
    assert.equal(
      this.error,
      undefined,
      `the cell failed: ${this.stderr}${JSON.stringify(this.error)}`,
    );
    return this;
  }

  #text(type: string): string {
    return this.events
      .filter((e) => e.type === type)
      .map((e) => e.text as string)
      .join("");
  }
}

/** A python3 with IPython, or why there is none. */
function findPython(): { python: string } | { why: string } {
  const candidates = [process.env.WARREN_TEST_PYTHON, "/usr/bin/python3", "python3"];
  for (const candidate of candidates) {
    const probe = candidate && spawnSync(candidate, ["-c", "import IPython"], { stdio: "ignore" });
    if (probe && probe.status === 0) return { python: candidate };
  }
  return { why: "no python3 with IPython on this host (Debian: apt install python3-ipython)" };
}

/** Which of these modules the python has (found, not imported: that is the driver's job). */
function installed(python: string | undefined, modules: readonly string[]): Set<string> {
  if (python === undefined) return new Set();
  const script = `import importlib.util as u; print(" ".join(m for m in ${JSON.stringify(modules)} if u.find_spec(m)))`;
  const probe = spawnSync(python, ["-c", script], { encoding: "utf8" });
  return new Set(probe.stdout?.split(/\s+/).filter(Boolean));
}

const found = findPython();
const PYTHON = "python" in found ? found.python : undefined;
const NO_PYTHON = "why" in found ? found.why : false;
const HAVE = installed(PYTHON, ["numpy", "pandas", "matplotlib", "matplotlib_inline", "PIL"]);
const lacks = (...modules: string[]) => {
  const missing = modules.filter((m) => !HAVE.has(m));
  return missing.length > 0 && `${missing.join(", ")} not installed for ${PYTHON}`;
};
const NO_CHARTS = lacks("numpy", "matplotlib", "matplotlib_inline");
const NO_PANDAS = lacks("pandas");
const NO_PIL = lacks("numpy", "PIL");
if (NO_PYTHON) console.log(`# python kernel tests skipped: ${NO_PYTHON}`);

describe("python kernel driver", { skip: NO_PYTHON }, () => {
  let root = "";
  let cwd = "";
  let kernel: Kernel;

  before(async () => {
    root = realpathSync(mkdtempSync(join(tmpdir(), "warren-pykernel-")));
    cwd = join(root, "cwd");
    mkdirSync(cwd);
    mkdirSync(join(root, "home")); // IPython's and matplotlib's caches
    kernel = new Kernel(PYTHON as string, cwd, join(root, "home"));
    await kernel.ready;
  });

  after(async () => {
    await kernel?.close();
    if (root) rmSync(root, { recursive: true, force: true });
  });

  it("says ready, then counts from 1 and gives the cell's value as the main result", async () => {
    assert.equal(kernel.events[0]?.type, "ready");
    const run = (await kernel.run("x = 1; x")).ok();
    assert.deepEqual(
      run.events.map((e) => e.type),
      ["execution_count", "result", "done"],
    );
    assert.equal(run.count, 1);
    assert.deepEqual(run.results, [{ main: true, data: { "text/plain": "1" } }]);
  });

  it("keeps state between executions", async () => {
    await kernel.run("counter = 1");
    assert.equal((await kernel.run("counter += 1; counter")).ok().text, "2");
  });

  it("forwards print as stdout and stderr, in order", async () => {
    assert.equal((await kernel.run('print("hello")')).ok().stdout, "hello\n");
    const run = (
      await kernel.run('import sys; print("This is an error message", file=sys.stderr)')
    ).ok();
    assert.equal(run.stderr, "This is an error message\n");
    assert.equal(run.stdout, "");
    const mixed = (await kernel.run('import os\nprint("a")\nos.system("echo b")\nprint("c")')).ok();
    assert.equal(mixed.stdout, "a\nb\nc\n");
  });

  it("reports an exception as one error event, and the execution still counts", async () => {
    const before = (await kernel.run("1")).count as number;
    const run = await kernel.run("undefined_name");
    assert.equal(run.count, before + 1);
    assert.equal(run.events.filter((e) => e.type === "error").length, 1);
    assert.equal(run.error?.name, "NameError");
    assert.equal(run.error?.value, "name 'undefined_name' is not defined");
    assert.match(run.error?.traceback as string, /NameError/);
    assert.equal(run.events.at(-1)?.type, "done");
  });

  it("counts a syntax error as an execution", async () => {
    const failed = await kernel.run("echo 'E2B is awesome!'");
    assert.equal(failed.error?.name, "SyntaxError");
    const next = (await kernel.run("!pwd")).ok();
    assert.equal(next.count, (failed.count as number) + 1);
  });

  it("runs !cmd in the context's cwd, its output on stdout", async () => {
    assert.equal((await kernel.run("!pwd")).ok().stdout, `${cwd}\n`);
    const run = (await kernel.run("!echo out; echo err >&2")).ok();
    assert.equal(run.stdout, "out\n");
    assert.equal(run.stderr, "err\n");
  });

  it("captures child processes' output before done", async () => {
    const run = (
      await kernel.run(
        "import os, subprocess\nos.system('echo hi')\nsubprocess.run('sleep 0.2; echo late', shell=True)",
      )
    ).ok();
    assert.equal(run.stdout, "hi\nlate\n");
  });

  it("drops output written between executions", async () => {
    await kernel.run("import subprocess; subprocess.Popen('sleep 0.3; echo stray', shell=True)");
    await new Promise((resolve) => setTimeout(resolve, 800));
    const run = (await kernel.run("'after'")).ok();
    assert.equal(run.stdout, "");
    assert.equal(
      kernel.events.filter((e) => e.type === "stdout" && e.text === "stray\n").length,
      0,
    );
  });

  it("sets env for one execution and globals for all, removing a dropped global", async () => {
    const read = "import os; os.environ.get('FOO', 'default')";
    const globals = { TEST_ENV_VAR: "supertest" };
    assert.equal((await kernel.run(read, { env: { FOO: "bar" }, globals })).ok().text, "'bar'");
    assert.equal((await kernel.run(read, { globals })).ok().text, "'default'");
    assert.equal(
      (await kernel.run("!echo $FOO", { env: { FOO: "child" }, globals })).ok().stdout,
      "child\n",
    );

    const readGlobal = "import os; os.environ.get('TEST_ENV_VAR')";
    assert.equal((await kernel.run(readGlobal, { globals })).ok().text, "'supertest'");
    const overridden = await kernel.run(readGlobal, {
      env: { TEST_ENV_VAR: "overwrite" },
      globals,
    });
    assert.equal(overridden.ok().text, "'overwrite'");
    assert.equal((await kernel.run(readGlobal, { globals })).ok().text, "'supertest'");
    const dropped = await kernel.run("print(os.environ.get('TEST_ENV_VAR'))", { globals: {} });
    assert.equal(dropped.ok().stdout, "None\n");
  });

  it("does not count silent executions", async () => {
    const first = (await kernel.run("1")).count as number;
    const silent = (await kernel.run("silent_value = 5; silent_value", { silent: true })).ok();
    assert.equal(silent.count, undefined);
    assert.deepEqual(silent.results, []);
    const next = (await kernel.run("silent_value")).ok();
    assert.equal(next.count, first + 1);
    assert.equal(next.text, "5");
  });

  it("ends an interrupted execution with KeyboardInterrupt and takes the next one", async () => {
    kernel.interrupt(); // idle: nothing to stop
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal((await kernel.run("1 + 1")).ok().text, "2");

    for (const code of [
      'import time\nprint("sleeping")\ntime.sleep(30)',
      "!echo sleeping; sleep 30",
    ]) {
      const id = kernel.nextId;
      const running = kernel.run(code);
      await kernel.waitFor(
        (e) => e.type === "stdout" && e.id === id && e.text === "sleeping\n",
        10_000,
      );
      const sent = Date.now();
      kernel.interrupt();
      const run = await running;
      assert.ok(Date.now() - sent < 3_000, `${code}: done ${Date.now() - sent} ms after SIGINT`);
      assert.equal(run.error?.name, "KeyboardInterrupt", code);
      assert.equal((await kernel.run("1 + 1")).ok().text, "2");
    }
  });

  it("sends 5 MB of output whole, before done", async () => {
    const run = (await kernel.run('print("x" * 5_000_000)')).ok();
    assert.equal(run.stdout.length, 5_000_001);
    assert.match(run.stdout, /^x+\n$/);
  });

  it("displays raw MIME bundles as they are", async () => {
    const run = (await kernel.run("display({'text/latex': r'\\frac{1}{2}'}, raw=True)")).ok();
    assert.deepEqual(run.results, [{ main: false, data: { "text/latex": "\\frac{1}{2}" } }]);
    const json = (await kernel.run("{'a': [1, 2], 'b': None}")).ok();
    assert.deepEqual(json.results[0]?.data["application/json"], { a: [1, 2], b: null });
  });

  it("shows a failing formatter as text, not as the cell's error", async () => {
    const code = "class Odd:\n    def _repr_html_(self): raise ValueError('no html')\nOdd()";
    const run = (await kernel.run(code)).ok();
    assert.match(run.stderr, /no html/);
    assert.match(run.text as string, /__main__\.Odd/);
  });

  describe("pandas", { skip: NO_PANDAS }, () => {
    it("gives a DataFrame e2b/data and text/html", async () => {
      const run = (await kernel.run('import pandas as pd\npd.DataFrame({"a": [1, 2, 3]})')).ok();
      const data = run.results[0]?.data ?? {};
      assert.deepEqual(data["e2b/data"], { a: [1, 2, 3] });
      assert.match(data["text/html"] as string, /<table/);
      const dates = (
        await kernel.run('pd.DataFrame({"t": pd.to_datetime(["2024-01-02"]), "f": [float("nan")]})')
      ).ok();
      assert.deepEqual(dates.results[0]?.data["e2b/data"], {
        t: ["2024-01-02T00:00:00"],
        f: [null],
      });
    });
  });

  describe("PIL", { skip: NO_PIL }, () => {
    const image =
      "import numpy\nfrom PIL import Image\n" +
      "image = Image.fromarray((numpy.random.rand(16, 16, 3) * 255).astype('uint8')).convert('RGBA')\n";

    it("displays an image on show() and save(path), and as a value", async () => {
      const shown = (await kernel.run(`${image}image.show()\nprint("done")`)).ok();
      assert.equal(shown.stdout, "done\n");
      assert.equal(shown.results[0]?.main, false);
      assert.ok(isPng(shown.results[0]?.data["image/png"]));
      assert.ok(
        isPng((await kernel.run("image")).ok().results.find((r) => r.main)?.data["image/png"]),
      );
      assert.ok(
        isPng((await kernel.run('image.save("test.png")')).ok().results[0]?.data["image/png"]),
      );
    });
  });

  describe("matplotlib", { skip: NO_CHARTS }, () => {
    it("shows a figure at plt.show() as display data with png, text and chart", async () => {
      const run = (
        await kernel.run(
          'import matplotlib.pyplot as plt\nprint("before")\nplt.plot([1, 2, 3])\nplt.show()',
        )
      ).ok();
      assert.deepEqual(
        run.events.map((e) => e.type),
        ["execution_count", "stdout", "result", "done"],
      );
      const [figure] = run.results;
      assert.equal(figure?.main, false);
      assert.equal(figure?.data["text/plain"], "<Figure size 640x480 with 1 Axes>");
      assert.ok(isPng(figure?.data["image/png"]));
      assert.equal(run.chart().type, "line");
    });

    it("shows figures left open at the end of the cell, after the cell's value", async () => {
      const run = (await kernel.run("plt.plot([1, 2])\nx = 3\nx")).ok();
      assert.deepEqual(
        run.results.map((r) => [r.main, r.data["text/plain"]]),
        [
          [true, "3"],
          [false, "<Figure size 640x480 with 1 Axes>"],
        ],
      );
    });

    it("extracts a bar chart", async () => {
      const chart = (await kernel.run(BAR)).ok().chart();
      assert.equal(chart.type, "bar");
      assert.equal(chart.title, "Book Sales by Authors");
      assert.equal(chart.x_label, "Authors");
      assert.equal(chart.y_label, "Number of Books Sold");
      assert.equal(chart.x_unit, null);
      assert.equal(chart.y_unit, null);
      assert.deepEqual(
        chart.elements.map((b: Chart) => b.value),
        [100, 200, 300, 400],
      );
      assert.deepEqual(
        chart.elements.map((b: Chart) => b.group),
        Array(4).fill("Books Sold"),
      );
      assert.deepEqual(
        chart.elements.map((b: Chart) => b.label),
        ["Author A", "Author B", "Author C", "Author D"],
      );
    });

    it("extracts a horizontal bar chart, categories on x", async () => {
      const chart = (
        await kernel.run(
          "plt.barh(['a', 'b'], [3, 5])\nplt.xlabel('Mass (kg)')\nplt.ylabel('Item')\nplt.show()",
        )
      )
        .ok()
        .chart();
      assert.equal(chart.type, "bar");
      assert.equal(chart.x_label, "Item");
      assert.equal(chart.y_unit, "kg");
      assert.deepEqual(chart.elements, [
        { label: "a", group: "Group 0", value: 3 },
        { label: "b", group: "Group 0", value: 5 },
      ]);
    });

    it("extracts a pie chart", async () => {
      const chart = (await kernel.run(PIE)).ok().chart();
      assert.equal(chart.type, "pie");
      assert.equal(chart.title, "Will I wake up early tomorrow?");
      assert.deepEqual(chart.elements, [
        { label: "No", angle: 324, radius: 1 },
        { label: "No, in blue", angle: 36, radius: 1 },
      ]);
      assert.equal("x_label" in chart, false);
    });

    it("extracts a box-and-whisker chart", async () => {
      const chart = (await kernel.run(BOX)).ok().chart();
      assert.equal(chart.type, "box_and_whisker");
      assert.equal(chart.title, "Exam Scores Distribution");
      assert.equal(chart.x_label, "Class");
      assert.equal(chart.y_label, "Score");
      assert.equal(chart.x_unit, null);
      assert.equal(chart.y_unit, null);
      const boxes = chart.elements;
      const field = (name: string) => boxes.map((b: Chart) => b[name]);
      assert.deepEqual(field("label"), ["Class A", "Class B", "Class C"]);
      assert.deepEqual(field("outliers"), [[], [76], []]);
      assert.deepEqual(field("min"), [78, 84, 75]);
      assert.deepEqual(field("first_quartile"), [85, 84.75, 79]);
      assert.deepEqual(field("median"), [88, 88, 82]);
      assert.deepEqual(field("third_quartile"), [90, 90.5, 86]);
      assert.deepEqual(field("max"), [92, 95, 88]);
    });

    it("extracts a line chart on a datetime scale, with units", async () => {
      const chart = (await kernel.run(LINE)).ok().chart();
      assert.equal(chart.type, "line");
      assert.equal(chart.title, "Plot of sin(x) and cos(x)");
      assert.equal(chart.x_label, "Time (s)");
      assert.equal(chart.y_label, "Amplitude (Hz)");
      assert.equal(chart.x_unit, "s");
      assert.equal(chart.y_unit, "Hz");
      assert.equal(chart.x_scale, "datetime");
      assert.equal(chart.y_scale, "linear");
      assert.ok(
        chart.x_ticks.every((t: unknown) => typeof t === "string" && !Number.isNaN(Date.parse(t))),
      );
      assert.ok(chart.y_ticks.every((t: unknown) => typeof t === "number"));
      assert.ok(
        [...chart.x_tick_labels, ...chart.y_tick_labels].every(
          (l: unknown) => typeof l === "string",
        ),
      );
      assert.deepEqual(
        chart.elements.map((l: Chart) => [l.label, l.points.length]),
        [
          ["sin(x)", 100],
          ["cos(x)", 100],
        ],
      );
      const points = chart.elements.flatMap((l: Chart) => l.points);
      assert.ok(
        points.every(([x, y]: unknown[]) => typeof x === "string" && typeof y === "number"),
      );
      assert.equal(
        new Date(chart.elements[0].points[0][0]).toISOString(),
        "2023-09-01T00:00:00.000Z",
      );
    });

    it("extracts a log scale", async () => {
      const chart = (await kernel.run(LOG)).ok().chart();
      assert.equal(chart.type, "line");
      assert.equal(chart.x_scale, "linear");
      assert.equal(chart.y_scale, "log");
      assert.equal(chart.x_unit, null);
      assert.equal(chart.y_unit, "log scale");
      assert.ok([...chart.x_ticks, ...chart.y_ticks].every((t: unknown) => typeof t === "number"));
      assert.equal(chart.elements.length, 1);
      assert.equal(chart.elements[0].label, "y = e^x");
      assert.equal(chart.elements[0].points.length, 100);
    });

    it("tells categorical and datetime scales (code sent indented)", async () => {
      const categorical = (await kernel.run(CATEGORICAL)).ok().chart();
      assert.deepEqual(
        [categorical.type, categorical.x_scale, categorical.y_scale],
        ["line", "linear", "categorical"],
      );
      const dates = (await kernel.run(DATES)).ok().chart();
      assert.deepEqual([dates.type, dates.x_scale, dates.y_scale], ["line", "datetime", "linear"]);
    });

    it("extracts a scatter chart", async () => {
      const chart = (await kernel.run(SCATTER)).ok().chart();
      assert.equal(chart.type, "scatter");
      assert.equal(chart.title, null);
      assert.equal(chart.x_label, "A");
      assert.equal(chart.y_label, "B");
      assert.ok([...chart.x_ticks, ...chart.y_ticks].every((t: unknown) => typeof t === "number"));
      assert.deepEqual(
        chart.elements.map((s: Chart) => [s.label, s.points.length]),
        [
          ["Dataset 1", 5],
          ["Dataset 2", 10],
        ],
      );
      const points = chart.elements.flatMap((s: Chart) => s.points);
      assert.ok(
        points.every(([x, y]: unknown[]) => typeof x === "number" && typeof y === "number"),
      );
    });

    it("extracts a superchart from several axes", async () => {
      const chart = (await kernel.run(SUPERCHART)).ok().chart();
      assert.equal(chart.type, "superchart");
      assert.equal(chart.title, "Multiple Charts Example");
      const [line, scatter] = chart.elements;
      assert.equal(chart.elements.length, 2);
      assert.deepEqual(
        [line.type, line.title, line.x_label, line.y_label],
        ["line", "Sine Wave", null, null],
      );
      assert.equal(line.elements.length, 1);
      assert.equal(line.elements[0].points.length, 100);
      assert.deepEqual(
        [scatter.type, scatter.title, scatter.x_label, scatter.y_label],
        ["scatter", "Scatter Plot", "X", "Y"],
      );
      assert.equal(scatter.elements[0].points.length, 5);
    });

    it("calls other drawings unknown, keeping the title", async () => {
      const chart = (await kernel.run(UNKNOWN)).ok().chart();
      assert.deepEqual(chart, { type: "unknown", title: "Two Concentric Circles", elements: [] });
    });

    it("carries every key of the schema, null where empty", async () => {
      const chart = (await kernel.run("plt.plot([1, 2])\nplt.show()")).ok().chart();
      for (const key of ["title", "x_label", "y_label", "x_unit", "y_unit"]) {
        assert.ok(key in chart && chart[key] === null, key);
      }
      for (const key of [
        "x_ticks",
        "x_tick_labels",
        "x_scale",
        "y_ticks",
        "y_tick_labels",
        "y_scale",
        "elements",
      ]) {
        assert.ok(key in chart, key);
      }
    });
  });

  it("exits when fd 0 closes", async () => {
    assert.equal(await kernel.close(), 0);
  });
});

function isPng(value: unknown): boolean {
  return (
    typeof value === "string" && Buffer.from(value, "base64").subarray(1, 4).toString() === "PNG"
  );
}

// The SDKs' chart tests' cells (docs/code-interpreter-wire.md §7).
const BAR = `
import matplotlib.pyplot as plt
authors = ['Author A', 'Author B', 'Author C', 'Author D']
sales = [100, 200, 300, 400]
plt.figure(figsize=(10, 6))
plt.bar(authors, sales, label='Books Sold', color='blue')
plt.xlabel('Authors')
plt.ylabel('Number of Books Sold')
plt.title('Book Sales by Authors')
plt.tight_layout()
plt.show()
`;

const PIE = `
import matplotlib.pyplot as plt
categories = ["No", "No, in blue"]
sizes = [90, 10]
fig, ax = plt.subplots(figsize=(8, 8))
plt.xlabel("x")
plt.ylabel("y")
ax.pie(sizes, labels=categories, autopct='%1.1f%%', startangle=90, colors=plt.cm.Pastel1.colors[:len(categories)])
ax.axis('equal')
plt.title('Will I wake up early tomorrow?')
plt.show()
`;

const BOX = `
import matplotlib.pyplot as plt
data = {
    'Class A': [85, 90, 78, 92, 88],
    'Class B': [95, 89, 76, 91, 84, 87],
    'Class C': [75, 82, 88, 79, 86]
}
fig, ax = plt.subplots(figsize=(10, 6))
ax.set_title('Exam Scores Distribution')
ax.set_xlabel('Class')
ax.set_ylabel('Score')
ax.boxplot(data.values(), labels=data.keys(), patch_artist=True)
ax.legend()
plt.tight_layout()
plt.show()
`;

const LINE = `
import numpy as np
import matplotlib.pyplot as plt
import datetime
dates = [datetime.date(2023, 9, 1) + datetime.timedelta(seconds=i) for i in range(100)]
x = np.linspace(0, 2*np.pi, 100)
plt.figure(figsize=(10, 6))
plt.plot(dates, np.sin(x), label='sin(x)')
plt.plot(dates, np.cos(x), label='cos(x)')
plt.xlabel("Time (s)")
plt.ylabel("Amplitude (Hz)")
plt.title('Plot of sin(x) and cos(x)')
plt.show()
`;

const LOG = `
import numpy as np
import matplotlib.pyplot as plt
x = np.linspace(0, 100, 100)
plt.figure(figsize=(10, 6))
plt.plot(x, np.exp(x), label='y = e^x')
plt.yscale('log')
plt.xlabel('X-axis')
plt.ylabel('Y-axis (log scale)')
plt.title('Chart with Log Scale on Y-axis')
plt.legend()
plt.grid(True)
plt.show()
`;

const CATEGORICAL = `
    import matplotlib.pyplot as plt
    plt.figure(figsize=(10, 6))
    plt.plot([1, 2, 3, 4, 5], ['A', 'B', 'C', 'D', 'E'])
    plt.show()
    `;

const DATES = `
    import numpy as np
    import matplotlib.pyplot as plt
    import datetime
    dates = [datetime.date(2023, 9, 1) + datetime.timedelta(seconds=i) for i in range(100)]
    plt.figure(figsize=(10, 6))
    plt.plot(dates, np.sin(np.linspace(0, 2*np.pi, 100)), label='sin(x)')
    plt.show()
    `;

const SCATTER = `
import matplotlib.pyplot as plt
import numpy as np
N = 5
plt.xlabel("A")
plt.ylabel("B")
plt.scatter(np.random.rand(N), np.random.rand(N), c='blue', label='Dataset 1')
plt.scatter(np.random.rand(2*N), np.random.rand(2*N), c='red', label='Dataset 2')
plt.show()
`;

const SUPERCHART = `
import matplotlib.pyplot as plt
import numpy as np
x1 = np.linspace(0, 10, 100)
fig, axs = plt.subplots(1, 2, figsize=(10, 8))
fig.suptitle('Multiple Charts Example', fontsize=16)
axs[0].plot(x1, np.sin(x1), 'r')
axs[0].set_title('Sine Wave')
axs[0].grid(True)
axs[1].scatter(np.random.rand(5), np.random.rand(5), c='blue', label='Dataset 1')
axs[1].set_xlabel('X')
axs[1].set_ylabel('Y')
axs[1].set_title('Scatter Plot')
axs[1].grid(True)
plt.show()
`;

const UNKNOWN = `
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.add_artist(plt.Circle((0, 0), 1, color='blue', fill=False, linewidth=2))
ax.add_artist(plt.Circle((0, 0), 2, color='red', fill=False, linewidth=2))
ax.grid(True)
plt.title('Two Concentric Circles')
plt.show()
`;
