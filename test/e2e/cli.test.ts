// The `warren` command (the bundle `npm run build` makes, as a user runs it) against
// a real server: sandboxes, exec with its exit code, cp, a shell driven through a real PTY
// (node-pty as the user's terminal), fork, snapshot, a template build with its progress,
// top, logs, the systemd unit; bad arguments and a stopped server as one-line errors.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import pty from "node-pty";
import { useServer } from "../helpers/server.js";

const ROOT = join(import.meta.dirname, "..", "..");
const CLI = join(ROOT, "dist", "cli", "warren.mjs");
const server = useServer();

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** The CLI as a user runs it, configured by WARREN_URL and WARREN_API_KEY. */
function warren(args: string[], env: Record<string, string> = {}): Promise<Run> {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...process.env, WARREN_URL: server.url, WARREN_API_KEY: server.apiKey, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

/** Runs and expects exit 0; its stdout. */
async function ok(args: string[]): Promise<string> {
  const run = await warren(args);
  assert.equal(run.code, 0, `warren ${args.join(" ")}: ${run.stderr}`);
  return run.stdout;
}

describe("warren, the command", () => {
  let work: string;
  let id: string;
  before(async () => {
    work = await mkdtemp(join(tmpdir(), "warren-cli-"));
    id = (await ok(["sandbox", "create", "--timeout", "10m", "--metadata", "suite=cli"])).trim();
  });
  after(async () => {
    await warren(["sandbox", "kill", id]);
    await rm(work, { recursive: true, force: true });
  });

  it("creates, lists and shows sandboxes, as a table or JSON", async () => {
    assert.match(id, /^[a-z0-9]+$/);
    const table = await ok(["sandbox", "ls"]);
    assert.match(table, /^ID\s+TEMPLATE\s+STATE/);
    assert.match(
      table,
      new RegExp(`${id}\\s+base\\s+running\\s+\\d+[sm]\\s+\\d+\\s+\\d+Mi\\s+suite=cli`),
    );
    const listed = JSON.parse(await ok(["sandbox", "ls", "--metadata", "suite=cli", "--json"]));
    assert.deepEqual(
      listed.map((s: { sandboxId: string }) => s.sandboxId),
      [id],
    );
    assert.deepEqual(
      JSON.parse(await ok(["sandbox", "ls", "--metadata", "suite=none", "--json"])),
      [],
    );
    const info = JSON.parse(await ok(["sandbox", "info", id, "--json"]));
    assert.equal(info.state, "running");
  });

  it("exec streams a command's output and exits with its exit code", async () => {
    const run = await warren(["exec", id, "--", "sh", "-c", "echo out; echo err >&2; exit 3"]);
    assert.equal(run.code, 3);
    assert.equal(run.stdout, "out\n");
    assert.equal(run.stderr, "err\n");
    assert.equal(
      await ok(["exec", id, "--", "echo $((6 * 7)) | tr 4 x"]),
      "x2\n",
      "one word: a command line",
    );
    assert.equal(await ok(["exec", id, "--user", "root", "--", "whoami"]), "root\n");
    const envs = ["-e", "A=1", "-e", "B=x=y", "--cwd", "/tmp", "--", "echo $A $B $(pwd)"];
    assert.equal(await ok(["exec", id, ...envs]), "1 x=y /tmp\n", "--env (repeatable), --cwd");
    const bad = await warren(["exec", id, "-e", "novalue", "--", "true"]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--env novalue is not key=value/);
  });

  it("copies files into and out of a sandbox", async () => {
    const local = join(work, "in.txt");
    await writeFile(local, "copied in\n");
    await ok(["cp", local, `${id}:/home/user/in.txt`]);
    assert.equal(await ok(["exec", id, "--", "cat", "/home/user/in.txt"]), "copied in\n");
    await ok(["cp", `${id}:/home/user/in.txt`, join(work, "out.txt")]);
    assert.equal(await readFile(join(work, "out.txt"), "utf8"), "copied in\n");
    const both = await warren(["cp", `${id}:/a`, `${id}:/b`]);
    assert.equal(both.code, 2);
  });

  it("shell: an interactive PTY in the user's terminal, resized with it", async () => {
    const terminal = pty.spawn(process.execPath, [CLI, "shell", id], {
      name: "xterm-256color",
      cols: 100,
      rows: 30,
      env: { ...process.env, WARREN_URL: server.url, WARREN_API_KEY: server.apiKey } as Record<
        string,
        string
      >,
    });
    let screen = "";
    terminal.onData((data) => {
      screen += data;
    });
    const exited = new Promise<number>((resolve) =>
      terminal.onExit(({ exitCode }) => resolve(exitCode)),
    );
    const seen = async (pattern: RegExp, what: string) => {
      const deadline = Date.now() + 30_000;
      while (!pattern.test(screen)) {
        if (Date.now() > deadline)
          assert.fail(`${what} not on the screen:\n${screen.slice(-2000)}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    };
    try {
      await seen(/\$ $/m, "a prompt");
      terminal.write("echo answer-$((6*7))\r");
      await seen(/answer-42/, "the command's output");
      terminal.write("stty size\r");
      await seen(/30 100/, "the terminal's size");
      terminal.resize(120, 40);
      await new Promise((resolve) => setTimeout(resolve, 500));
      terminal.write("stty size\r");
      await seen(/40 120/, "the new size");
      terminal.write("exit 5\r");
      assert.equal(await exited, 5, "the shell's exit code");
    } finally {
      terminal.kill();
    }
  });

  it("forks a sandbox into children and snapshots it", async () => {
    const children = JSON.parse(await ok(["fork", id, "-n", "2", "--json"]));
    assert.equal(children.length, 2);
    for (const child of children) assert.match(child.sandboxId, /^[a-z0-9]+$/);
    const listed = await ok(["sandbox", "ls"]);
    for (const child of children) assert.ok(listed.includes(child.sandboxId));
    await ok(["sandbox", "kill", ...children.map((c: { sandboxId: string }) => c.sandboxId)]);
    const snapshot = (await ok(["snapshot", id, "--name", "cli-snap"])).trim();
    assert.match(snapshot, /cli-snap/);
  });

  it("pauses, resumes and kills; logs show the sandbox's life", async () => {
    await ok(["sandbox", "pause", id]);
    assert.match(
      await ok(["sandbox", "ls", "--state", "paused"]),
      new RegExp(`${id}\\s+base\\s+paused`),
    );
    const again = await warren(["sandbox", "pause", id]);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /^warren: .*already paused/);
    await ok(["sandbox", "resume", id]);
    const logs = await ok(["sandbox", "logs", id]);
    for (const event of ["sandbox.created", "sandbox.paused", "sandbox.resumed"]) {
      assert.match(logs, new RegExp(event));
    }
    assert.match(logs, / envd\s+process \d+ started/, "envd's own lines");
  });

  it("builds a template from a Dockerfile, showing its progress; lists and deletes templates", async () => {
    const dir = join(work, "tpl");
    await rm(dir, { recursive: true, force: true });
    await mkdir(dir);
    await writeFile(join(dir, "Dockerfile"), "FROM e2bdev/base\nRUN echo built-by-cli > /built\n");
    const build = await warren([
      "template",
      "build",
      "-f",
      join(dir, "Dockerfile"),
      "--name",
      "cli-tpl",
    ]);
    assert.equal(build.code, 0, build.stderr);
    assert.match(build.stderr, /\[\s*\d+\.\ds\] info/, "progress lines with elapsed time");
    assert.match(build.stdout, /^cli-tpl/);
    const made = (await ok(["sandbox", "create", "cli-tpl"])).trim();
    try {
      assert.equal(await ok(["exec", made, "--", "cat", "/built"]), "built-by-cli\n");
    } finally {
      await ok(["sandbox", "kill", made]);
    }
    assert.match(await ok(["template", "ls"]), /cli-tpl/);
    await ok(["template", "rm", "cli-tpl"]);
    assert.doesNotMatch(await ok(["template", "ls"]), /cli-tpl/);
    const missing = await warren(["template", "rm", "cli-tpl"]);
    assert.equal(missing.code, 1);
    assert.equal(missing.stderr.split("\n").filter(Boolean).length, 1, missing.stderr);
  });

  it("top prints the node's totals and the sandboxes (with the admin token), a team's alone with its key", async () => {
    const team = await ok(["top", "--once"]);
    assert.doesNotMatch(team, /node {2}sandboxes \d+\/\d+/, "a team's key sees no node totals");
    assert.match(team, new RegExp(`${id}\\s+base\\s+running`));
    const screen = await ok(["top", "--once", "--admin-token", server.adminToken]);
    assert.match(screen, /^warren top /);
    assert.match(screen, /node {2}sandboxes \d+\/\d+ {2}vCPUs \d+\/\d+/);
    assert.match(screen, new RegExp(`${id}\\s+base\\s+running`));
  });

  it("writes the systemd unit for this tree", async () => {
    const root = join(work, "root");
    await ok(["service", "install", "--root", root, "--no-start"]);
    const unit = await readFile(join(root, "etc/systemd/system/warren-node.service"), "utf8");
    assert.ok(
      unit.includes(
        `ExecStart=${process.execPath} --enable-source-maps ${ROOT}/dist/server/main.mjs`,
      ),
    );
    assert.doesNotMatch(unit, /\/opt\/warren/);
    await ok(["service", "uninstall", "--root", root, "--no-stop"]);
  });

  it("says what is wrong in one line: bad arguments (exit 2), an unknown sandbox, a stopped server", async () => {
    const oneLine = (run: Run) => {
      const lines = run.stderr.split("\n").filter(Boolean);
      assert.equal(lines.length, 1, run.stderr);
      assert.match(lines[0] as string, /^warren: /);
    };
    for (const args of [
      ["bogus"],
      ["fork"],
      ["sandbox", "create", "--timeout", "soon"],
      ["fork", id, "-n", "0"],
    ]) {
      const run = await warren(args);
      assert.equal(run.code, 2, `${args.join(" ")}: ${run.stderr}`);
      oneLine(run);
    }
    const unknown = await warren(["exec", "doesnotexist000", "--", "true"]);
    assert.equal(unknown.code, 1);
    oneLine(unknown);
    const nobody = `http://127.0.0.1:${await closedPort()}`;
    const stopped = await warren(["sandbox", "ls"], { WARREN_URL: nobody });
    assert.equal(stopped.code, 1);
    oneLine(stopped);
    assert.ok(stopped.stderr.includes(`cannot reach Warren at ${nobody}`), stopped.stderr);
    const help = await warren(["sandbox", "create", "--help"]);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /--timeout <duration>/);
  });
});

/** A loopback port nothing listens on (bound once, then released). */
async function closedPort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const { port } = probe.address() as { port: number };
  await new Promise((resolve) => probe.close(resolve));
  return port;
}
