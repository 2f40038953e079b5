// The R kernel driver (warren_kernel.R) on this host's Rscript, spawned and driven as envd
// does (spawnDriver + DriverKernel, kernels/PROTOCOL.md): values as R prints them, output in
// order, plots as PNGs, errors, env vars, state, interrupts by SIGINT (also a burst of them,
// and one between runs), the driver gone once fd 0 closes.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { DriverKernel } from "../../driver-kernel.js";
import { type DriverProcess, spawnDriver } from "../../driver-process.js";
import type { ExecuteRequest, KernelEvent } from "../../kernel.js";

const RSCRIPT = "/usr/bin/Rscript";
const DRIVER = join(import.meta.dirname, "warren_kernel.R");
const hasR =
  spawnSync(RSCRIPT, ["-e", "library(jsonlite); library(evaluate)"], { stdio: "ignore" }).status ===
  0;

interface Run {
  readonly events: KernelEvent[];
  readonly stdout: string;
  readonly stderr: string;
  /** The main result's text/plain. */
  readonly value: string | undefined;
  readonly error: Extract<KernelEvent, { type: "error" }> | undefined;
}

describe("r kernel driver", {
  skip:
    !hasR &&
    "Rscript with jsonlite and evaluate is not installed on this host (apt-get install r-base-core r-cran-jsonlite r-cran-evaluate)",
}, () => {
  const cwd = realpathSync(mkdtempSync(join(tmpdir(), "warren-r-kernel-")));
  let driver: DriverProcess;
  let kernel: DriverKernel;

  before(async () => {
    driver = spawnDriver({
      command: RSCRIPT,
      args: ["--vanilla", DRIVER],
      cwd,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: cwd, LANG: "C.UTF-8" },
      interruptBy: "SIGINT",
    });
    kernel = new DriverKernel("r", driver);
    await kernel.ready;
  });

  after(() => {
    kernel.close();
    rmSync(cwd, { recursive: true, force: true });
  });

  async function run(
    code: string,
    request: Partial<ExecuteRequest> = {},
    onEvent?: (event: KernelEvent) => void,
  ): Promise<Run> {
    const events: KernelEvent[] = [];
    await kernel.execute(
      { code, env: {}, globals: {}, ...request },
      {
        emit: (event) => {
          events.push(event);
          onEvent?.(event);
          return true;
        },
        onDrain: () => {},
      },
    );
    const texts = (type: "stdout" | "stderr") =>
      events.flatMap((e) => (e.type === type ? [e.text] : [])).join("");
    const main = events.find((e) => e.type === "result" && e.main);
    return {
      events,
      stdout: texts("stdout"),
      stderr: texts("stderr"),
      value: main?.type === "result" ? String(main.data["text/plain"]) : undefined,
      error: events.find((e) => e.type === "error") as Run["error"],
    };
  }

  it("answers the last visible value as R prints it, counting executions", async () => {
    const first = await run('x <- "bar"; x');
    assert.deepEqual(first.events[0], { type: "execution_count", count: 1 });
    assert.equal(first.value, '[1] "bar"');
    assert.equal((await run("x <- 5")).value, undefined, "an assignment shows nothing");
    assert.equal((await run("invisible(3)")).value, undefined);
    const silent = await run("1", { silent: true });
    assert.equal(silent.events[0]?.type, "result", "a silent run has no count");
    assert.deepEqual((await run("x * 2")).events[0], { type: "execution_count", count: 4 });
  });

  it("streams printed output in order; a value with output after it is not the cell's value", async () => {
    const ran = await run('print(1:3)\ncat("hi\\n")\n42');
    assert.equal(ran.stdout, "[1] 1 2 3\nhi\n");
    assert.equal(ran.value, "[1] 42");
    const shown = await run('7\ncat("after\\n")');
    assert.equal(shown.value, undefined);
    const display = shown.events.find((e) => e.type === "result");
    assert.ok(display?.type === "result" && !display.main);
    assert.equal(display.data["text/plain"], "[1] 7");
    const types = shown.events.map((e) => e.type);
    assert.ok(types.indexOf("result") < types.indexOf("stdout"), types.join());
  });

  it("sends warnings and messages to stderr", async () => {
    const ran = await run(
      'warning("careful"); message("note"); f <- function() warning("deep"); f()',
    );
    assert.equal(ran.stderr, "Warning message:\ncareful\nnote\nWarning message:\nin f(): deep\n");
    assert.equal(ran.error, undefined);
  });

  it("ends a failing cell with its error and runs nothing after it", async () => {
    const top = await run('stop("boom")\ny <- "not reached"');
    assert.deepEqual(top.error, {
      type: "error",
      name: "ERROR",
      value: "boom",
      traceback: "Error: boom",
    });
    assert.equal((await run('exists("y")')).value, "[1] FALSE");
    const inner = await run('g <- function() stop("inner"); g()');
    assert.equal(inner.error?.value, "in g(): inner");
  });

  it("draws plots as PNG results", async () => {
    const ran = await run("plot(1:10)\nhist(rnorm(100))");
    const plots = ran.events.filter((e) => e.type === "result");
    assert.equal(plots.length, 2);
    for (const plot of plots) {
      assert.ok(plot.type === "result" && !plot.main);
      const png = Buffer.from(String(plot.data["image/png"]), "base64");
      assert.equal(png.subarray(1, 4).toString(), "PNG");
      assert.equal(png.readUInt32BE(16), 504, "width");
      assert.equal(plot.data["text/plain"], "plot without title");
    }
  });

  it("shows a data frame as text and as an HTML table", async () => {
    const ran = await run('data.frame(n = 1:2, s = c("a", "<b>"))');
    const main = ran.events.find((e) => e.type === "result");
    assert.ok(main?.type === "result");
    assert.equal(main.data["text/plain"], "  n   s\n1 1   a\n2 2 <b>");
    const html = String(main.data["text/html"]);
    assert.match(html, /^<table class="dataframe">/);
    assert.match(html, /<th>n<\/th><th>s<\/th>/);
    assert.match(html, /<td>2<\/td><td>&lt;b&gt;<\/td>/);
  });

  it("keeps the sandbox's env vars and puts a run's own back", async () => {
    const read = 'Sys.getenv("V", unset = "unset")';
    assert.equal((await run(read, { globals: { V: "global" } })).value, '[1] "global"');
    assert.equal(
      (await run(read, { globals: { V: "global" }, env: { V: "own" } })).value,
      '[1] "own"',
    );
    assert.equal((await run(read, { globals: { V: "global" } })).value, '[1] "global"');
    assert.equal((await run(read)).value, '[1] "unset"', "a global removed");
    assert.equal((await run(read, { env: { V: "own" } })).value, '[1] "own"');
    assert.equal((await run(read)).value, '[1] "unset"');
  });

  it("runs in the context's cwd", async () => {
    assert.equal((await run("getwd()")).value, `[1] "${cwd}"`);
  });

  it("interrupts a busy loop and a sleep, repeated as envd repeats them, and lives on", async () => {
    for (const code of ["n <- 0; while (TRUE) n <- n + 1", "Sys.sleep(300)"]) {
      let repeat: NodeJS.Timeout | undefined;
      const ran = await run(`cat("started\\n"); ${code}`, {}, (event) => {
        if (event.type !== "stdout") return;
        repeat = setTimeout(() => {
          kernel.interrupt();
          repeat = setInterval(() => driver.interrupt(), 5);
        }, 200);
      });
      clearTimeout(repeat);
      clearInterval(repeat);
      assert.equal(ran.error?.name, "KeyboardInterrupt", code);
      assert.equal(ran.events.at(-1)?.type, "error", code);
    }
    const after = await run("n > 0");
    assert.equal(after.value, "[1] TRUE", JSON.stringify(after.events));
  });

  it("ignores an interrupt between runs", async () => {
    driver.interrupt();
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal((await run('"still here"')).value, '[1] "still here"');
    assert.equal(kernel.alive, true);
  });

  it("exits once fd 0 closes", async () => {
    driver.requests.end();
    assert.equal(await driver.ended, "exited (status 0)");
  });
});
