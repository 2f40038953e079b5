// The code interpreter's HTTP server on this host, with the real kernels (bash, the Python
// driver on the host's python3 with IPython, the JS driver on this Node): the wire E2B's SDKs
// read, errors, one run at a time per context, interrupts when a client goes away, kernels
// that die. The SDK itself runs against it in test/e2e/code-interpreter.test.ts.
import assert from "node:assert/strict";
import { execFile, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { type AddressInfo, connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { Contexts } from "./contexts.js";
import { createInterpreter, type Interpreter } from "./interpreter-server.js";
import { kernelStarter } from "./kernel-starter.js";

const kernels = join(import.meta.dirname, "kernels");
const PYTHON = "/usr/bin/python3"; // Debian's, with python3-ipython (a pyenv python3 may come first on PATH)
const hasIPython = spawnSync(PYTHON, ["-c", "import IPython"]).status === 0;
const RSCRIPT = "/usr/bin/Rscript";
const hasR =
  spawnSync(RSCRIPT, ["-e", "library(jsonlite); library(evaluate)"], { stdio: "ignore" }).status ===
  0;
if (!hasR)
  console.log(
    "# without R (apt-get install r-base-core r-cran-jsonlite r-cran-evaluate): R's runs are left out",
  );

describe("code interpreter server", {
  skip:
    !hasIPython &&
    "python3 with IPython is not installed on this host (apt-get install python3-ipython)",
}, () => {
  const cwd = mkdtempSync(join(tmpdir(), "warren-interpreter-"));
  let globals: Record<string, string> = { SANDBOX_VAR: "global" };
  let contexts: Contexts;
  let interpreter: Interpreter;
  let url: string;

  before(async () => {
    contexts = new Contexts(
      kernelStarter(
        {
          pythonZygote: [PYTHON, join(kernels, "python", "warren_zygote.py")],
          // Its cwd is the context's: tsx is named by URL, not resolved from there.
          javascript: [
            process.execPath,
            "--import",
            import.meta.resolve("tsx"),
            join(kernels, "js", "js-kernel.ts"),
          ],
          r: [RSCRIPT, "--vanilla", join(kernels, "r", "warren_kernel.R")],
        },
        () => globals,
        join(cwd, ".kernels", "kernels.sock"),
      ),
      cwd,
    );
    interpreter = createInterpreter({ contexts, globals: () => globals });
    await new Promise<void>((resolve) => interpreter.server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(interpreter.server.address() as AddressInfo).port}`;
    await interpreter.started;
  });

  after(() => {
    contexts.closeAll();
    interpreter.server.close();
    interpreter.server.closeAllConnections();
    rmSync(cwd, { recursive: true, force: true });
  });

  /** POST /execute: the status and, for 200, every line parsed (a blank line fails). */
  async function execute(
    body: unknown,
  ): Promise<{ status: number; text: string; lines: Record<string, unknown>[] }> {
    const res = await fetch(`${url}/execute?source=ci`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    const text = await res.text();
    if (res.status !== 200) return { status: res.status, text, lines: [] };
    assert.ok(text.endsWith("\n"), "every line ends with a newline");
    const lines = text
      .slice(0, -1)
      .split("\n")
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    assert.deepEqual(lines.at(-1), { type: "end_of_execution" });
    return { status: 200, text, lines };
  }

  const ofType = (lines: Record<string, unknown>[], type: string) =>
    lines.filter((l) => l.type === type);

  it("answers /health once the default python and javascript contexts run", async () => {
    const res = await fetch(`${url}/health`);
    assert.equal(res.status, 200);
    assert.equal(await res.json(), "OK");
    const listed = (await (await fetch(`${url}/contexts`)).json()) as {
      language: string;
      cwd: string;
    }[];
    assert.deepEqual(
      listed.map((c) => [c.language, c.cwd]),
      [
        ["python", cwd],
        ["javascript", cwd],
      ],
    );
  });

  it("warms the python and javascript defaults silently: their first counted run is the first", async () => {
    const warmed = await fetch(`${url}/warm`, { method: "POST" });
    assert.equal(warmed.status, 204);
    for (const language of ["python", "javascript"]) {
      const { lines } = await execute({ code: "2 + 3", language });
      assert.deepEqual(ofType(lines, "number_of_executions"), [
        { type: "number_of_executions", execution_count: 1 },
      ]);
      assert.equal(ofType(lines, "result")[0]?.text, "5", language);
    }
  });

  it("runs python by default: count, stdout with a timestamp, the main result with quotes off and extra", async () => {
    const { lines } = await execute({
      code: "print('hi')\n'quoted'",
      context_id: null,
      language: null,
      env_vars: null,
    });
    assert.equal(lines[0]?.type, "number_of_executions");
    const [out] = ofType(lines, "stdout");
    assert.equal(out?.text, "hi\n");
    assert.ok(!Number.isNaN(Date.parse(String(out?.timestamp))), "an ISO timestamp");
    assert.deepEqual(ofType(lines, "result"), [
      { type: "result", text: "quoted", extra: {}, is_main_result: true },
    ]);
  });

  it("refuses bad requests with the status and a message that says what to fix", async () => {
    const both = await execute({ code: "1", context_id: "x", language: "python" });
    assert.deepEqual(
      [both.status, both.text],
      [400, "Only one of context_id or language can be provided"],
    );
    const unknown = await execute({ code: "1", context_id: "nope" });
    assert.deepEqual([unknown.status, unknown.text], [404, "Context nope not found"]);
    const notCode = await execute({ code: { language: "python" } });
    assert.deepEqual([notCode.status, notCode.text], [400, "code must be a string"]);
    const lang = await execute({ code: "1", language: "cobol" });
    assert.equal(lang.status, 400);
    assert.match(lang.text, /unsupported language 'cobol'.*python, javascript, typescript, bash/);
    const badCwd = await fetch(`${url}/contexts`, {
      method: "POST",
      body: JSON.stringify({ cwd: "/no/such/dir" }),
    });
    assert.equal(badCwd.status, 400);
    assert.match(await badCwd.text(), /cwd '\/no\/such\/dir' is not a directory/);
    const notJson = await fetch(`${url}/execute`, { method: "POST", body: "{" });
    assert.equal(notJson.status, 400);
    assert.equal((await fetch(`${url}/nothing`)).status, 404);
    assert.equal((await fetch(`${url}/contexts/nope`, { method: "DELETE" })).status, 404);
    assert.equal((await fetch(`${url}/contexts/nope/restart`, { method: "POST" })).status, 404);
  });

  it("bash: state between cells, output split from the marker, a failing status as the run's error", async () => {
    const created = await fetch(`${url}/contexts`, {
      method: "POST",
      body: JSON.stringify({ language: "bash" }),
    });
    const context = (await created.json()) as { id: string; language: string };
    assert.equal(context.language, "bash");
    await execute({ code: "cd /tmp; V=kept; printf 'no newline'", context_id: context.id });
    const { lines } = await execute({
      code: "pwd; echo $V; echo err >&2; false",
      context_id: context.id,
    });
    assert.equal(
      ofType(lines, "stdout")
        .map((l) => l.text)
        .join(""),
      "/tmp\nkept\n",
    );
    assert.equal(
      ofType(lines, "stderr")
        .map((l) => l.text)
        .join(""),
      "err\n",
    );
    assert.deepEqual(ofType(lines, "error"), [
      { type: "error", name: "ExitCode", value: "exit status 1", traceback: "" },
    ]);
  });

  it("sets the sandbox's env vars for good and a run's own for that run, in every kernel", async () => {
    const read = {
      python: "import os; os.getenv('V', 'unset')",
      bash: 'if [ -n "$V" ]; then echo "$V"; else echo unset; fi',
      javascript: "process.env.V ?? 'unset'",
      ...(hasR ? { r: 'cat(Sys.getenv("V", unset = "unset"))' } : {}),
    };
    for (const [language, code] of Object.entries(read)) {
      const value = async (env?: Record<string, string>) => {
        const { lines } = await execute({ code, language, env_vars: env ?? null });
        return String(
          ofType(lines, language === "bash" || language === "r" ? "stdout" : "result")[0]?.text ??
            "",
        ).trim();
      };
      globals = { V: "global" };
      assert.equal(await value(), "global", language);
      assert.equal(await value({ V: "own" }), "own", language);
      assert.equal(await value(), "global", `${language}: put back`);
      globals = {};
      assert.equal(await value(), "unset", `${language}: a global removed`);
    }
    globals = { SANDBOX_VAR: "global" };
  });

  it("runs one execution at a time per context, in order", async () => {
    const context = (await (
      await fetch(`${url}/contexts`, { method: "POST", body: "{}" })
    ).json()) as { id: string };
    const slow = execute({
      code: "import time\ntime.sleep(1)\norder = ['slow']",
      context_id: context.id,
    });
    const fast = execute({ code: "order.append('fast'); order", context_id: context.id });
    await slow;
    const { lines } = await fast;
    assert.equal(ofType(lines, "result")[0]?.text, "['slow', 'fast']");
  });

  it("interrupts a run whose client went away; the kernel answers the next run", async () => {
    const controller = new AbortController();
    const res = await fetch(`${url}/execute`, {
      method: "POST",
      body: JSON.stringify({ code: "import time\ntime.sleep(300)" }),
      signal: controller.signal,
    });
    assert.equal(res.status, 200, "headers go out before the run ends");
    controller.abort();
    const started = performance.now();
    const { lines } = await execute({ code: "1 + 1" });
    assert.equal(ofType(lines, "result")[0]?.text, "2");
    assert.ok(
      performance.now() - started < 5_000,
      "the abandoned run was interrupted, not waited for",
    );
  });

  it("a kernel that dies ends its run with an error; the next run gets a new kernel", async () => {
    const context = (await (
      await fetch(`${url}/contexts`, { method: "POST", body: "{}" })
    ).json()) as { id: string };
    await execute({ code: "lost = 1", context_id: context.id });
    const died = await execute({ code: "import os; os._exit(3)", context_id: context.id });
    const [error] = ofType(died.lines, "error");
    assert.equal(error?.name, "KernelExited");
    assert.match(String(error?.value), /python kernel exited \(status 3\).*state is lost/);
    const next = await execute({ code: "'lost' in globals()", context_id: context.id });
    assert.equal(ofType(next.lines, "result")[0]?.text, "False");
  });

  it("keeps an idle connection past Node's 5 s default: the proxy reuses its pooled ones", async () => {
    const socket = connect((interpreter.server.address() as AddressInfo).port, "127.0.0.1");
    socket.on("error", () => {});
    let closed = false;
    socket.on("close", () => {
      closed = true;
    });
    let received = "";
    socket.on("data", (chunk: Buffer) => {
      received += chunk.toString();
    });
    const health = async () => {
      received = "";
      socket.write("GET /health HTTP/1.1\r\nHost: envd\r\nConnection: keep-alive\r\n\r\n");
      for (let i = 0; i < 100 && !/\r\n\r\n[\s\S]*\S/.test(received) && !closed; i++)
        await new Promise((r) => setTimeout(r, 50));
      return received.split("\r\n")[0];
    };
    assert.equal(await health(), "HTTP/1.1 200 OK");
    await new Promise((r) => setTimeout(r, 7_000)); // Node closes at 5 s + 1 s
    assert.equal(closed, false, "the interpreter closed an idle connection after 5 s");
    assert.equal(await health(), "HTTP/1.1 200 OK");
    socket.destroy();
  });

  it("is what the Python SDK reads (a stdlib client of its wire: nulls, timestamps, chart keys)", async () => {
    const check = join(import.meta.dirname, "../../../test/helpers/python_wire_check.py");
    // Not spawnSync: the server answering it runs in this process.
    const run = await promisify(execFile)(PYTHON, [check, url], { timeout: 120_000 }).catch(
      (err: { stdout?: string; stderr?: string }) => assert.fail(`${err.stdout}${err.stderr}`),
    );
    assert.match(run.stdout, /ok context removed/);
  });

  it("restarts a context (state gone, cwd and id kept) and removes one", async () => {
    const created = await fetch(`${url}/contexts`, {
      method: "POST",
      body: JSON.stringify({ cwd: "/tmp" }),
    });
    const context = (await created.json()) as { id: string; cwd: string };
    await execute({ code: "z = 1", context_id: context.id });
    const restarted = await fetch(`${url}/contexts/${context.id}/restart`, { method: "POST" });
    assert.deepEqual([restarted.status, await restarted.json()], [200, null]);
    const { lines } = await execute({
      code: "import os\nprint(os.getcwd())\nz",
      context_id: context.id,
    });
    assert.equal(ofType(lines, "stdout")[0]?.text, "/tmp\n");
    assert.equal(ofType(lines, "error")[0]?.name, "NameError");
    assert.equal((await fetch(`${url}/contexts/${context.id}`, { method: "DELETE" })).status, 200);
    const listed = (await (await fetch(`${url}/contexts`)).json()) as { id: string }[];
    assert.ok(!listed.some((c) => c.id === context.id));
  });

  it("on a secure sandbox runs nobody's code without envd's token: /execute 401, a wrong token 401 everywhere", async () => {
    const token = "envd-token-of-this-sandbox";
    const secure = createInterpreter({
      contexts,
      globals: () => globals,
      authorize: (presented) => presented === token,
    });
    await new Promise<void>((resolve) => secure.server.listen(0, "127.0.0.1", resolve));
    const secureUrl = `http://127.0.0.1:${(secure.server.address() as AddressInfo).port}`;
    try {
      const run = (headers: Record<string, string>) =>
        fetch(`${secureUrl}/execute`, {
          method: "POST",
          headers: { "content-type": "application/json", ...headers },
          body: JSON.stringify({ code: "print('ran')", language: "python" }),
        });
      for (const headers of [{}, { "x-access-token": "guessed" }] as Record<string, string>[]) {
        const refused = await run(headers);
        assert.equal(refused.status, 401, JSON.stringify(headers));
        assert.equal(refused.headers.get("cache-control"), "no-store");
        assert.match(await refused.text(), /Unauthorized/);
      }
      // What the SDK sends: X-Access-Token on /execute.
      const allowed = await run({ "x-access-token": token });
      assert.equal(allowed.status, 200);
      assert.match(await allowed.text(), /ran/);
      // The contexts' routes: the released SDK (2.8.0) sends no token there, so none is
      // required; a wrong one is still refused.
      assert.equal((await fetch(`${secureUrl}/contexts`)).status, 200);
      const wrong = await fetch(`${secureUrl}/contexts`, { headers: { "x-access-token": "x" } });
      assert.equal(wrong.status, 401);
      // /health stays open (the SDK and the proxy's readiness checks read it).
      assert.equal((await fetch(`${secureUrl}/health`)).status, 200);
    } finally {
      secure.server.close();
      secure.server.closeAllConnections();
    }
  });
});
