import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import type { Readable, Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";

const ENTRY = fileURLToPath(new URL("./js-kernel.ts", import.meta.url));
const TSX = import.meta.resolve("tsx");

type Event = { type: string; id?: string } & Record<string, unknown>;

interface Run {
  readonly events: Event[];
  /** The stdout (or stderr) texts, in order. */
  readonly stdout: string[];
  readonly stderr: string[];
  readonly result: string | undefined;
  readonly error: Event | undefined;
}

/** One driver process, as envd runs it: requests on fd 0, events on fd 3. */
class Driver {
  readonly child: ChildProcess;
  readonly ready: Promise<void>;
  /** What the driver wrote to its own fd 1 and 2 (envd's diagnostics). */
  own = "";
  readonly #waiting = new Map<
    string,
    { events: Event[]; done: (events: Event[]) => void; started?: () => void }
  >();
  #nextId = 1;

  constructor(cwd: string, env: Record<string, string> = {}) {
    this.child = spawn(process.execPath, ["--import", TSX, ENTRY, "--language", "javascript"], {
      cwd,
      env: { PATH: process.env.PATH, HOME: cwd, LANG: "C.UTF-8", ...env },
      stdio: ["pipe", "pipe", "pipe", "pipe"],
    });
    for (const out of [this.child.stdout, this.child.stderr]) {
      out?.on("data", (chunk: Buffer) => {
        this.own += chunk.toString();
      });
    }
    const lines = createInterface({ input: this.child.stdio[3] as Readable });
    this.ready = new Promise((resolve) => {
      lines.on("line", (line) => {
        const event = JSON.parse(line) as Event;
        if (event.type === "ready") return resolve();
        const waiting = this.#waiting.get(event.id ?? "");
        assert.ok(waiting, `an event of no execution in progress: ${line}`);
        waiting.events.push(event);
        if (waiting.events.length === 1) waiting.started?.();
        if (event.type === "done") {
          this.#waiting.delete(event.id ?? "");
          waiting.done(waiting.events);
        }
      });
    });
  }

  /** Sends one execute request; resolves with its events once `done` came. */
  send(
    code: string,
    options: {
      env?: Record<string, string>;
      globals?: Record<string, string>;
      silent?: boolean;
    } = {},
    started?: () => void,
  ): Promise<Event[]> {
    const id = `r${this.#nextId++}`;
    return new Promise((done) => {
      this.#waiting.set(id, { events: [], done, started });
      const request = {
        type: "execute",
        id,
        code,
        env: {},
        globals: {},
        silent: false,
        ...options,
      };
      (this.child.stdin as Writable).write(`${JSON.stringify(request)}\n`);
    });
  }

  async run(
    code: string,
    options?: Parameters<Driver["send"]>[1],
    started?: () => void,
  ): Promise<Run> {
    const events = await this.send(code, options, started);
    const texts = (type: string) =>
      events.filter((e) => e.type === type).map((e) => e.text as string);
    const results = events.filter((e) => e.type === "result");
    const errors = events.filter((e) => e.type === "error");
    assert.ok(results.length <= 1 && errors.length <= 1, JSON.stringify(events));
    assert.equal(events.at(-1)?.type, "done");
    const data = results[0]?.data as Record<string, string> | undefined;
    return {
      events,
      stdout: texts("stdout"),
      stderr: texts("stderr"),
      result: data?.["text/plain"],
      error: errors[0],
    };
  }

  /** Asks for an interrupt (PROTOCOL.md), as envd does. */
  sendInterrupt(): void {
    (this.child.stdin as Writable).write(`${JSON.stringify({ type: "interrupt" })}\n`);
  }

  /**
   * Runs `code`, asking for an interrupt after `ms` and then every `ms` until it ends, as envd
   * does: one that comes before the driver took the request up finds it idle.
   */
  async interrupt(code: string, ms: number): Promise<Run> {
    let repeat: NodeJS.Timeout | undefined;
    try {
      return await this.run(code, {}, () => {
        repeat = setInterval(() => this.sendInterrupt(), ms);
      });
    } finally {
      clearInterval(repeat);
    }
  }

  /** Ends fd 0 (the driver exits); a driver stuck in a failed test is killed after 5 s. */
  close(): Promise<number | null> {
    return new Promise((resolve) => {
      if (this.child.exitCode !== null) return resolve(this.child.exitCode);
      const stuck = setTimeout(() => this.child.kill("SIGKILL"), 5000);
      this.child.once("exit", (code) => {
        clearTimeout(stuck);
        resolve(code);
      });
      this.child.stdin?.end();
    });
  }
}

describe("js-kernel driver", { timeout: 120_000 }, () => {
  let home: string;
  let driver: Driver;

  before(async () => {
    home = realpathSync(mkdtempSync(join(tmpdir(), "js-kernel-test-")));
    const pkg = join(home, "node_modules", "kpkg");
    mkdirSync(pkg, { recursive: true });
    writeFileSync(
      join(pkg, "package.json"),
      '{"name":"kpkg","exports":{"import":"./i.mjs","require":"./r.cjs"}}',
    );
    writeFileSync(join(pkg, "i.mjs"), "export default 'esm'; export const kind = 'esm named';");
    writeFileSync(join(pkg, "r.cjs"), "module.exports = { kind: 'cjs' };");
    // A "global" node_modules folder outside the cwd's ancestry, named by NODE_PATH.
    const globalDir = join(home, "global", "node_modules");
    mkdirSync(join(globalDir, "gpkg"), { recursive: true });
    writeFileSync(join(globalDir, "gpkg", "package.json"), '{"name":"gpkg","main":"index.js"}');
    writeFileSync(join(globalDir, "gpkg", "index.js"), "exports.where = 'global';");
    driver = new Driver(home, { NODE_PATH: globalDir });
    await driver.ready;
  });

  after(async () => {
    if (driver) assert.equal(await driver.close(), 0);
    assert.equal(driver?.own, "", "the driver's own fd 1/2 stay quiet");
    rmSync(home, { recursive: true, force: true });
  });

  it("prints, counts executions and shows values as util.inspect does", async () => {
    const first = await driver.run('console.log("Hello World!")');
    assert.deepEqual(first.events[0], {
      type: "execution_count",
      id: first.events[0]?.id,
      count: 1,
    });
    assert.deepEqual(first.stdout, ["Hello World!\n"]);
    assert.equal(first.result, undefined);
    const second = await driver.run("await Promise.resolve('Hello World!')");
    assert.equal(second.events[0]?.count, 2);
    assert.equal(second.result, "'Hello World!'");
    assert.deepEqual(second.events[1], {
      type: "result",
      id: second.events[0]?.id,
      main: true,
      data: { "text/plain": "'Hello World!'" },
    });
    assert.equal((await driver.run("process.cwd()")).result, `'${home}'`);
    assert.equal((await driver.run("({ a: [1, 2], b: 'x' })")).result, "{ a: [ 1, 2 ], b: 'x' }");
    const custom = await driver.run(
      "({ [Symbol.for('Jupyter.display')]() { return { 'text/html': '<b>hi</b>' } } })",
    );
    assert.deepEqual(custom.events[1]?.data, {
      "text/html": "<b>hi</b>",
      "text/plain": "{ [Symbol(Jupyter.display)]: [Function: [Jupyter.display]] }",
    });
    assert.ok(custom.result);
  });

  it("imports ES modules and requires CommonJS from the cwd's node_modules", async () => {
    const fs = await driver.run(
      "import { readFileSync } from 'fs'\nconsole.log(typeof readFileSync)",
    );
    assert.deepEqual(fs.stdout, ["function\n"]);
    assert.deepEqual(fs.stderr, [], "no loader warning in the cell's output");
    assert.equal(
      (await driver.run("import k, { kind } from 'kpkg'; [k, kind]")).result,
      "[ 'esm', 'esm named' ]",
    );
    assert.equal((await driver.run("require('kpkg').kind")).result, "'cjs'");
    assert.equal((await driver.run("(await import('node:path')).sep")).result, "'/'");
    assert.equal((await driver.run("import { where } from 'gpkg'; where")).result, "'global'");
    assert.equal((await driver.run("require('gpkg').where")).result, "'global'");
  });

  it("runs TypeScript and keeps state across cells", async () => {
    const ts = await driver.run('const x: string = "Hello World!"; console.log(x)');
    assert.deepEqual(ts.stdout, ["Hello World!\n"]);
    await driver.run("function add(a: number, b: number): number { return a + b }");
    assert.equal((await driver.run("add(1, 2)")).result, "3");
    await driver.run("const z = 1");
    assert.equal((await driver.run("z")).result, "1");
    const again = await driver.run("const z = 2; z");
    assert.equal(again.error, undefined);
    assert.equal(again.result, "2");
  });

  it("reports a thrown error once, and a syntax error", async () => {
    const thrown = await driver.run("await null\nundefinedThing");
    assert.equal(thrown.error?.name, "ReferenceError");
    assert.equal(thrown.error?.value, "undefinedThing is not defined");
    assert.match(
      thrown.error?.traceback as string,
      /^ReferenceError: undefinedThing is not defined\n {4}at <cell \d+>:2:1/,
    );
    assert.doesNotMatch(thrown.error?.traceback as string, /js-kernel|node:vm/);
    const syntax = await driver.run("let = = 1");
    assert.equal(syntax.error?.name, "SyntaxError");
    assert.equal(syntax.events[0]?.type, "execution_count", "errors count too");
  });

  it("survives unhandled rejections and uncaught exceptions in callbacks", async () => {
    const run = await driver.run(
      "Promise.reject(new Error('nobody waits')); setTimeout(() => { throw new Error('in a timer') }, 1)\n" +
        "await new Promise((r) => setTimeout(r, 50)); 'alive'",
    );
    assert.equal(run.result, "'alive'");
    const stderr = run.stderr.join("");
    assert.match(stderr, /Unhandled promise rejection: Error: nobody waits/);
    assert.match(stderr, /Uncaught Error: in a timer/);
    assert.equal((await driver.run("1 + 1")).result, "2");
  });

  it("sets globals for good and env for one run", async () => {
    const globals = { TEST_ENV_VAR: "supertest", GONE_LATER: "1" };
    const env = await driver.run("[process.env.TEST_ENV_VAR, process.env.FOO]", {
      globals,
      env: { FOO: "bar" },
    });
    assert.equal(env.result, "[ 'supertest', 'bar' ]");
    const after = await driver.run("[process.env.TEST_ENV_VAR, process.env.FOO]", { globals });
    assert.equal(after.result, "[ 'supertest', undefined ]");
    const override = await driver.run("process.env.TEST_ENV_VAR", {
      globals,
      env: { TEST_ENV_VAR: "overwrite" },
    });
    assert.equal(override.result, "'overwrite'");
    const restored = await driver.run("[process.env.TEST_ENV_VAR, process.env.GONE_LATER]", {
      globals: { TEST_ENV_VAR: "supertest" },
    });
    assert.equal(restored.result, "[ 'supertest', undefined ]");
  });

  it("runs silently: no execution count, and the count does not move", async () => {
    const before = (await driver.run("1")).events[0]?.count as number;
    const silent = await driver.run("process.chdir(process.cwd()); 5", { silent: true });
    assert.deepEqual(
      silent.events.map((e) => e.type),
      ["result", "done"],
    );
    assert.equal((await driver.run("1")).events[0]?.count, before + 1);
  });

  it("forwards large output completely before done", async () => {
    const big = await driver.run(
      "process.stdout.write('x'.repeat(3_000_000)); for (let i = 0; i < 20000; i++) console.log(i)",
    );
    const text = big.stdout.join("");
    const lines = Array.from({ length: 20000 }, (_, i) => `${i}\n`).join("");
    assert.equal(text.length, 3_000_000 + lines.length);
    assert.ok(text.startsWith("x".repeat(3_000_000)) && text.endsWith(lines));
  });

  it("captures the output of child processes with inherited stdio", async () => {
    const run = await driver.run(
      "const cp = require('child_process')\n" +
        "cp.execSync('echo sync; echo sync-err >&2', { stdio: 'inherit' })\n" +
        "await new Promise((r) => cp.spawn('sh', ['-c', 'echo async'], { stdio: 'inherit' }).on('close', r))\n" +
        "require('fs').writeSync(1, 'direct\\n')",
    );
    assert.equal(run.stdout.join(""), "sync\nasync\ndirect\n");
    assert.equal(run.stderr.join(""), "sync-err\n");
  });

  it("interrupts a busy synchronous loop and lives on", async () => {
    const run = await driver.interrupt("let spins = 0; while (true) { spins++ }", 500);
    assert.equal(run.error?.name, "KeyboardInterrupt");
    assert.equal((await driver.run("spins > 0")).result, "true");
  });

  it("interrupts a pending await", async () => {
    const run = await driver.interrupt("await new Promise((r) => setTimeout(r, 300_000))", 300);
    assert.equal(run.error?.name, "KeyboardInterrupt");
    assert.equal((await driver.run("1 + 1")).result, "2");
  });

  it("interrupts a busy loop after an await, in a callback, and in execSync", async () => {
    for (const code of [
      "await null; while (true) {}",
      "setTimeout(() => { while (true) {} }, 1); await new Promise((r) => setTimeout(r, 300_000))",
      "require('child_process').execSync('sleep 60')",
    ]) {
      const started = Date.now();
      const run = await driver.interrupt(code, 400);
      assert.equal(run.error?.name, "KeyboardInterrupt", code);
      assert.ok(Date.now() - started < 10_000, code);
      assert.equal((await driver.run("'next'")).result, "'next'", code);
    }
  });

  it("keeps working when a cell replaces globals the driver uses", async () => {
    await driver.run("var saved = { process, Buffer, JSON, globalThis }");
    const replaced = await driver.run(
      "const process = 1; var Buffer = 2; JSON = null; globalThis = 3; 'ok'",
    );
    assert.equal(replaced.result, "'ok'");
    assert.equal(
      (await driver.run("import { sep } from 'path'; [typeof process, sep]")).result,
      "[ 'number', '/' ]",
    );
    assert.equal(
      (await driver.interrupt("await null; while (true) {}", 300)).error?.name,
      "KeyboardInterrupt",
    );
    await driver.run("({ process, Buffer, JSON, globalThis } = saved)");
    assert.equal((await driver.run("typeof process.env")).result, "'object'");
  });

  it("survives a burst of interrupts: every run ends, the kernel lives on (CI's hangs)", async () => {
    for (let i = 0; i < 5; i++) {
      const run = await driver.interrupt("let n = 0; while (true) { n++ }", 5);
      assert.equal(run.error?.name, "KeyboardInterrupt");
    }
    assert.equal(driver.child.exitCode, null);
    assert.equal((await driver.run("'alive'")).result, "'alive'");
  });

  it("interrupts a cell that starts in the event-loop turn of another's callback (CI's first-interrupt hang)", {
    timeout: 20_000,
  }, async () => {
    // The first cell leaves an immediate; the second starts in the same turn, after it. Cut
    // short there (inside Node's immediate queue), the kernel spun on a broken queue forever.
    const first = driver.run("setImmediate(() => {}); 'first'");
    const busy = driver.interrupt("let m = 0; while (true) { m++ }", 300);
    assert.equal((await first).result, "'first'");
    assert.equal((await busy).error?.name, "KeyboardInterrupt");
    assert.equal((await driver.run("'after'")).result, "'after'");
  });

  it("exits, rather than spin, when an interrupt breaks the cell's own setImmediate queue", async () => {
    // Not the driver's to prevent: a cell's second immediate of a turn, cut short, leaves
    // Node's queue broken. The kernel says so and exits; envd starts a new one.
    const doomed = new Driver(home);
    try {
      await doomed.ready;
      const exited = new Promise<number | null>((resolve) => doomed.child.once("exit", resolve));
      const run = await doomed.interrupt(
        "setImmediate(() => {}); setImmediate(() => { while (true) {} }); await new Promise((r) => setTimeout(r, 300_000))",
        300,
      );
      assert.equal(run.error?.name, "KeyboardInterrupt");
      assert.equal(await exited, 1);
      assert.match(doomed.own, /immediate queue cannot recover: exiting/);
      assert.doesNotMatch(doomed.own, /Uncaught TypeError/);
    } finally {
      doomed.child.kill("SIGKILL");
    }
  });

  it("ignores an interrupt while idle", async () => {
    driver.sendInterrupt();
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(driver.child.exitCode, null);
    assert.equal((await driver.run("'still here'")).result, "'still here'");
  });
});
