// E2B's code interpreter SDK (@e2b/code-interpreter from npm), unchanged, against Warren's
// code-interpreter-v1 template: Sandbox.create() with no options, runCode in each language,
// contexts, state, streaming callbacks, env vars, display data and charts, interrupts, a
// killed sandbox, reconnect, and the kernels' state through pause/resume, fork and snapshots.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { Sandbox } from "@e2b/code-interpreter";
import { INTERPRETER_PORT } from "../../src/protocol/index.js";
import { runEnv } from "../helpers/run-env.js";
import { useServer, waitFor } from "../helpers/server.js";

// A data dir of its own: the files after this one find no code-interpreter-v1 among their
// templates, and no captures of it in their snapshots.
const server = useServer({
  WARREN_HOME: join(runEnv().dataDir, "code-interpreter"),
  WARREN_CODE_INTERPRETER: "on",
  WARREN_LOG_LEVEL: "info",
});

/** The template's first capture runs after the server starts: a cold boot, kernels started. */
const CAPTURE_MS = 900_000;

describe("code interpreter (@e2b/code-interpreter)", () => {
  let sandbox: Sandbox;

  before(async () => {
    await waitFor(
      "code-interpreter-v1 captured",
      () => {
        const failed = server.logs.find((l) => l.msg === "code_interpreter.capture_failed");
        if (failed) assert.fail(`the capture failed: ${JSON.stringify(failed.err)}`);
        return server.logs.some((l) => l.msg === "code_interpreter.ready");
      },
      CAPTURE_MS,
    );
    sandbox = await Sandbox.create({ timeoutMs: 600_000 });
  });

  after(async () => {
    await sandbox?.kill();
  });

  it("runs Python with no options: a value, its execution count, state kept between runs", async () => {
    const first = await sandbox.runCode("x = 1; x");
    assert.equal(first.text, "1");
    assert.equal(first.executionCount, 1, "the template's and the pool's warm-ups do not count");
    assert.equal(first.error, undefined);
    const second = await sandbox.runCode("x += 1; x");
    assert.equal(second.text, "2");
    assert.equal(second.executionCount, (first.executionCount ?? 0) + 1);
  });

  it("streams stdout, stderr, results and errors to callbacks, in order", async () => {
    const stdout: string[] = [];
    const stderr: string[] = [];
    const results: unknown[] = [];
    const errors: string[] = [];
    const run = await sandbox.runCode(
      "import sys\nprint('hello')\nprint('oops', file=sys.stderr)\n41 + 1",
      {
        onStdout: (m) => {
          stdout.push(m.line);
        },
        onStderr: (m) => {
          stderr.push(m.line);
        },
        onResult: (r) => {
          results.push(r.text);
        },
        onError: (e) => {
          errors.push(e.name);
        },
      },
    );
    assert.deepEqual(stdout, ["hello\n"]);
    assert.deepEqual(stderr, ["oops\n"]);
    assert.deepEqual(results, ["42"]);
    assert.deepEqual(run.logs.stdout, ["hello\n"]);
    assert.equal(errors.length, 0, "no error in the first run");
    const failed = await sandbox.runCode("undefined_name", {
      onError: (e) => {
        errors.push(e.name);
      },
    });
    assert.equal(failed.error?.name, "NameError");
    assert.match(failed.error?.value ?? "", /undefined_name/);
    assert.deepEqual(errors, ["NameError"]);
  });

  it("shell escapes and subprocesses print into the run; cwd is /home/user", async () => {
    const run = await sandbox.runCode("!pwd\nimport subprocess\nsubprocess.run(['echo', 'child'])");
    assert.equal(run.logs.stdout.join(""), "/home/user\nchild\n");
  });

  it("gives the sandbox's env vars to every language, a run's own env vars to that run only", async () => {
    const withEnvs = await Sandbox.create({ envs: { TEST_ENV_VAR: "supertest" } });
    try {
      const read = "import os; os.getenv('TEST_ENV_VAR')";
      assert.equal((await withEnvs.runCode(read)).text, "supertest");
      assert.equal(
        (await withEnvs.runCode(read, { envs: { TEST_ENV_VAR: "overwrite" } })).text,
        "overwrite",
      );
      assert.equal((await withEnvs.runCode(read)).text, "supertest");
      assert.equal(
        (await withEnvs.runCode("import os; os.getenv('FOO', 'default')", { envs: { FOO: "bar" } }))
          .text,
        "bar",
      );
      assert.equal(
        (await withEnvs.runCode("import os; os.getenv('FOO', 'default')")).text,
        "default",
      );
      const js = await withEnvs.runCode("process.env.TEST_ENV_VAR", { language: "js" });
      assert.equal(js.text, "supertest");
      const bash = await withEnvs.runCode("echo $TEST_ENV_VAR", { language: "bash" });
      assert.equal(bash.logs.stdout.join(""), "supertest\n");
      const r = await withEnvs.runCode('Sys.getenv("TEST_ENV_VAR")', { language: "r" });
      assert.equal(r.results[0]?.text?.trim(), '[1] "supertest"');
      const rOwn = await withEnvs.runCode('Sys.getenv("TEST_ENV_VAR")', {
        language: "r",
        envs: { TEST_ENV_VAR: "overwrite" },
      });
      assert.equal(rOwn.results[0]?.text?.trim(), '[1] "overwrite"');
    } finally {
      await withEnvs.kill();
    }
  });

  it("runs JavaScript and TypeScript: console output, ESM imports, top-level await, values", async () => {
    const log = await sandbox.runCode('console.log("Hello World!")', { language: "js" });
    assert.deepEqual(log.logs.stdout, ["Hello World!\n"]);
    const imported = await sandbox.runCode(
      "import { readFileSync } from 'fs'\nconsole.log(typeof readFileSync)",
      { language: "javascript" },
    );
    assert.deepEqual(imported.logs.stdout, ["function\n"]);
    const awaited = await sandbox.runCode("await Promise.resolve('Hello World!')", {
      language: "js",
    });
    assert.equal(awaited.text, "Hello World!");
    assert.equal((await sandbox.runCode("process.cwd()", { language: "ts" })).text, "/home/user");
    const typed = await sandbox.runCode('const greeting: string = "typed"; console.log(greeting)', {
      language: "typescript",
    });
    assert.deepEqual(typed.logs.stdout, ["typed\n"]);
    const thrown = await sandbox.runCode("throw new TypeError('bad')", { language: "js" });
    assert.equal(thrown.error?.name, "TypeError");
  });

  it("runs R: values as R prints them, output, state, plots, errors", async () => {
    const value = await sandbox.runCode('x <- "bar"; x', { language: "r" });
    assert.equal(value.text, '[1] "bar"');
    const printed = await sandbox.runCode('cat(getwd(), "\\n"); nchar(x)', { language: "r" });
    assert.deepEqual(printed.logs.stdout, ["/home/user \n"]);
    assert.equal(printed.text, "[1] 3");
    const plot = await sandbox.runCode("plot(1:10)", { language: "r" });
    assert.equal(plot.results.length, 1);
    assert.equal(
      Buffer.from(plot.results[0]?.png ?? "", "base64")
        .subarray(1, 4)
        .toString(),
      "PNG",
    );
    const failed = await sandbox.runCode('stop("boom")', { language: "r" });
    assert.equal(failed.error?.value, "boom");
  });

  it("runs bash, and refuses a language it does not have with a clear message", async () => {
    const run = await sandbox.runCode("cd /tmp && pwd", { language: "bash" });
    assert.deepEqual(run.logs.stdout, ["/tmp\n"]);
    assert.deepEqual((await sandbox.runCode("pwd", { language: "bash" })).logs.stdout, ["/tmp\n"]);
    await assert.rejects(sandbox.runCode("1", { language: "cobol" }), /400/);
    await assert.rejects(sandbox.runCode("1", { language: "java" }), /400/);
  });

  it("creates, lists, restarts and removes contexts; each has its own state", async () => {
    const context = await sandbox.createCodeContext({ cwd: "/root" });
    assert.equal(context.language, "python");
    assert.equal(context.cwd, "/root");
    const listed = await sandbox.listCodeContexts();
    assert.deepEqual(listed.at(-1), context);
    assert.ok(listed.some((c) => c.language === "javascript"));
    assert.equal((await sandbox.runCode("import os; os.getcwd()", { context })).text, "/root");
    await sandbox.runCode("y = 5", { context });
    assert.equal((await sandbox.runCode("y", { context })).text, "5");
    const other = await sandbox.runCode("y");
    assert.equal(other.error?.name, "NameError", "the default context does not see y");
    await sandbox.restartCodeContext(context);
    const restarted = await sandbox.runCode("y", { context });
    assert.equal(restarted.error?.value, "name 'y' is not defined");
    await sandbox.removeCodeContext(context);
    assert.ok(!(await sandbox.listCodeContexts()).some((c) => c.id === context.id));
    await assert.rejects(sandbox.runCode("1", { context }), /not found/);
  });

  it("shows plots as PNG and chart data, DataFrames as data and HTML", async () => {
    const plot = await sandbox.runCode(
      [
        "import matplotlib.pyplot as plt",
        "plt.bar(['Author A', 'Author B', 'Author C', 'Author D'], [100, 200, 300, 400], label='Books Sold')",
        "plt.title('Book Sales')",
        "plt.xlabel('Authors')",
        "plt.ylabel('Number of Books Sold')",
        "plt.show()",
      ].join("\n"),
    );
    const [figure] = plot.results;
    assert.ok(figure?.png, "a PNG");
    assert.ok(figure?.text?.startsWith("<Figure"), figure?.text);
    assert.deepEqual(figure?.extra, {});
    const chart = figure?.chart as unknown as {
      type: string;
      title: string;
      elements: { label: string; value: number; group: string }[];
    };
    assert.equal(chart.type, "bar");
    assert.equal(chart.title, "Book Sales");
    assert.deepEqual(
      chart.elements.map((e) => e.value),
      [100, 200, 300, 400],
    );
    assert.deepEqual(
      chart.elements.map((e) => e.label),
      ["Author A", "Author B", "Author C", "Author D"],
    );
    const frame = await sandbox.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2, 3]})");
    assert.deepEqual(frame.results[0]?.data, { a: [1, 2, 3] });
    assert.ok(frame.results[0]?.html?.includes("<table"));
  });

  it("is what E2B's Python SDK reads, through the proxy (a stdlib client of its wire)", async () => {
    const check = new URL("../helpers/python_wire_check.py", import.meta.url).pathname;
    // The sandbox is secure (the SDK's default): /execute takes envd's token, as the SDK sends it.
    const detail = await fetch(`${server.url}/sandboxes/${sandbox.sandboxId}`, {
      headers: { "x-api-key": server.apiKey },
    });
    const { envdAccessToken } = (await detail.json()) as { envdAccessToken: string };
    const headers = [
      `E2b-Sandbox-Id:${sandbox.sandboxId}`,
      `E2b-Sandbox-Port:${INTERPRETER_PORT}`,
      `--access-token=${envdAccessToken}`,
    ];
    const run = await promisify(execFile)("/usr/bin/python3", [check, server.url, ...headers], {
      timeout: 300_000,
    }).catch((err: { stdout?: string; stderr?: string }) =>
      assert.fail(`${err.stdout}${err.stderr}`),
    );
    assert.match(run.stdout, /ok context removed/);
    // Without envd's token, the sandbox's 49999 runs nobody's code (the SDKs send it).
    const stranger = await fetch(`${server.url}/execute`, {
      method: "POST",
      headers: {
        "e2b-sandbox-id": sandbox.sandboxId,
        "e2b-sandbox-port": String(INTERPRETER_PORT),
        "content-type": "application/json",
      },
      body: JSON.stringify({ code: "print('ran')" }),
    });
    assert.equal(stranger.status, 401);
  });

  it("interrupts a run whose client timed out: the kernel lives on and answers the next", async () => {
    await assert.rejects(
      sandbox.runCode("import time\ntime.sleep(300)", { timeoutMs: 3_000 }),
      /timed out/i,
    );
    const next = await sandbox.runCode("1 + 1", { timeoutMs: 20_000 });
    assert.equal(next.text, "2");
  });

  it("keeps each kernel's state through pause and resume, and through reconnects", async () => {
    await sandbox.runCode("kept = 'before pause'");
    await sandbox.pause();
    const resumed = await Sandbox.connect(sandbox.sandboxId);
    assert.equal((await resumed.runCode("kept")).text, "before pause");
  });

  it("forks: each child starts from the source's kernel state and diverges from there", async () => {
    await sandbox.runCode("counter = 10");
    const kids = (await sandbox.fork({ count: 2 })).map((child) => {
      assert.ok(!(child instanceof Error), String(child));
      return child;
    });
    try {
      const [a, b] = kids as [Sandbox, Sandbox];
      assert.equal((await a.runCode("counter += 1; counter")).text, "11");
      assert.equal((await b.runCode("counter += 5; counter")).text, "15");
      assert.equal((await sandbox.runCode("counter")).text, "10", "the source is untouched");
    } finally {
      await Promise.all(kids.map((k) => k.kill()));
    }
  });

  it("starts sandboxes from a persistent snapshot with the kernel's state at the capture", async () => {
    await sandbox.runCode("snapped = 'at the snapshot'");
    const { snapshotId } = await sandbox.createSnapshot();
    await sandbox.runCode("snapped = 'after'");
    const started = await Sandbox.create(snapshotId);
    try {
      assert.equal((await started.runCode("snapped")).text, "at the snapshot");
      assert.equal((await sandbox.runCode("snapped")).text, "after");
    } finally {
      await started.kill();
    }
  });

  it("a sandbox killed during a run ends that run with the SDK's 'killed' error", async () => {
    const doomed = await Sandbox.create();
    // Its outcome is taken at once: the run may end before the kill's own answer arrives.
    const outcome = doomed.runCode("import time\ntime.sleep(60)").then(
      () => assert.fail("the run ended normally"),
      (err: unknown) => err,
    );
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    await Sandbox.kill(doomed.sandboxId);
    assert.match(String(await outcome), /sandbox was killed while the request was in progress/);
  });
});
