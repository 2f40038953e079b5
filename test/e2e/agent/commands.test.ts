import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { AuthenticationError, CommandExitError, InvalidArgumentError, TimeoutError } from "e2b";
import { Process, Signal } from "../../../src/protocol/gen/process/process_pb.js";
import { useAgentSandbox } from "../../helpers/envd.js";

describe("envd commands through the e2b SDK", () => {
  const agent = useAgentSandbox();

  const rpc = () =>
    createClient(Process, createConnectTransport({ baseUrl: agent.env.url, httpVersion: "1.1" }));

  it("runs a command and returns stdout, stderr and the exit code", async () => {
    const result = await agent.sbx.commands.run('echo "hello world"; echo oops >&2');
    assert.equal(result.exitCode, 0);
    assert.equal(result.stdout, "hello world\n");
    assert.equal(result.stderr, "oops\n");
  });

  it("streams output to callbacks as it is produced", async () => {
    const chunks: string[] = [];
    await agent.sbx.commands.run("for i in 1 2 3; do echo line$i; sleep 0.05; done", {
      onStdout: (data) => {
        chunks.push(data);
      },
    });
    assert.equal(chunks.join(""), "line1\nline2\nline3\n");
    assert.ok(chunks.length >= 2, `expected several chunks, got ${JSON.stringify(chunks)}`);
  });

  it("reports a non-zero exit as CommandExitError with its output", async () => {
    const err = await agent.sbx.commands.run("echo partial; exit 7").then(
      () => assert.fail("should have thrown"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof CommandExitError);
    assert.equal(err.exitCode, 7);
    assert.equal(err.stdout, "partial\n");
    assert.equal(err.error, "exit status 7");
  });

  it("runs as `user` in /home/user by default, as root when asked", async () => {
    const asUser = await agent.sbx.commands.run("whoami; pwd; echo $HOME; id -gn");
    assert.equal(asUser.stdout, "user\n/home/user\n/home/user\nuser\n");
    const asRoot = await agent.sbx.commands.run("whoami; pwd", { user: "root" });
    assert.equal(asRoot.stdout, "root\n/root\n");
  });

  it("honours cwd and rejects one that does not exist", async () => {
    const result = await agent.sbx.commands.run("pwd", { cwd: "/tmp" });
    assert.equal(result.stdout, "/tmp\n");
    await assert.rejects(
      agent.sbx.commands.run("pwd", { cwd: "/no/such/dir" }),
      InvalidArgumentError,
    );
  });

  it("refuses an unknown user", async () => {
    await assert.rejects(
      agent.sbx.commands.run("true", { user: "nosuchuser" as "user" }),
      AuthenticationError,
    );
  });

  it("gives per-command envs to that command only, on top of /init's envs", async () => {
    const init = await agent.env.init({ envVars: { GLOBAL_VAR: "from-init" } });
    assert.equal(init.status, 204);
    const result = await agent.sbx.commands.run('echo "$GLOBAL_VAR $FOO $E2B_SANDBOX"', {
      envs: { FOO: "bar" },
    });
    assert.equal(result.stdout, "from-init bar true\n");
    const later = await agent.sbx.commands.run('echo "[$FOO]"');
    assert.equal(later.stdout, "[]\n");
    const py = await agent.sbx.commands.run("python3 -c \"import os; print(os.environ['FOO'])\"", {
      envs: { FOO: "py" },
    });
    assert.equal(py.stdout, "py\n");
  });

  it("lists, connects to and kills background commands", async () => {
    const handle = await agent.sbx.commands.run("sleep 1; echo tick; sleep 60", {
      background: true,
      timeoutMs: 0,
    });
    const listed = await agent.sbx.commands.list();
    const entry = listed.find((p) => p.pid === handle.pid);
    assert.ok(entry, "background process is listed");
    assert.equal(entry.cmd, "/bin/bash");
    assert.deepEqual(entry.args, ["-l", "-c", "sleep 1; echo tick; sleep 60"]);

    const seen: string[] = [];
    const attached = await agent.sbx.commands.connect(handle.pid, {
      onStdout: (d) => void seen.push(d),
    });
    assert.equal(attached.pid, handle.pid);
    const deadline = Date.now() + 10_000;
    while (!seen.join("").includes("tick") && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    assert.ok(seen.join("").includes("tick"), "connected stream receives new output");

    assert.equal(await agent.sbx.commands.kill(handle.pid), true);
    const ended = await attached.wait().then(
      () => assert.fail("killed process should not exit cleanly"),
      (e: unknown) => e,
    );
    assert.ok(ended instanceof CommandExitError);
    assert.equal(ended.exitCode, -1);
    assert.equal(ended.error, "signal: killed");
    await assert.rejects(agent.sbx.commands.run(`kill -0 ${handle.pid}`), CommandExitError);
    assert.ok(
      !(await agent.sbx.commands.list()).some((p) => p.pid === handle.pid),
      "killed process is no longer listed",
    );
  });

  it("answers false for an unknown pid and rejects connecting to one", async () => {
    assert.equal(await agent.sbx.commands.kill(999_999), false);
    await assert.rejects(agent.sbx.commands.connect(999_999));
  });

  it("passes stdin through and closes it", async () => {
    for (const text of ["Hello, World!", "!@#$%^&*()_+", "Hello,\nWorld!"]) {
      const handle = await agent.sbx.commands.run("cat", { background: true, stdin: true });
      await agent.sbx.commands.sendStdin(handle.pid, text);
      const deadline = Date.now() + 5_000;
      while (handle.stdout !== text && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 20));
      assert.equal(handle.stdout, text);
      await agent.sbx.commands.closeStdin(handle.pid);
      const result = await handle.wait();
      assert.equal(result.exitCode, 0, "cat ends once stdin is closed");
    }
  });

  it("refuses stdin for a command started without it", async () => {
    const handle = await agent.sbx.commands.run("sleep 30", { background: true });
    await assert.rejects(agent.sbx.commands.sendStdin(handle.pid, "x"), /stdin/);
    await agent.sbx.commands.kill(handle.pid);
  });

  it("kills a command at its timeout and reports a TimeoutError", async () => {
    const started = Date.now();
    await assert.rejects(
      agent.sbx.commands.run("sleep 10; echo survived > /tmp/warren-timeout-probe", {
        timeoutMs: 1000,
      }),
      TimeoutError,
    );
    assert.ok(Date.now() - started < 5_000);
    await new Promise((r) => setTimeout(r, 200));
    const listed = await agent.sbx.commands.list();
    assert.ok(
      !listed.some((p) => p.args.join(" ").includes("warren-timeout-probe")),
      "timed-out process was killed",
    );
  });

  it("ends a Start whose deadline passed with deadline_exceeded, not an end event (envd's wire)", async () => {
    // The deadline only as the header: the server must end the stream, not the client.
    const stream = rpc().start(
      { process: { cmd: "/bin/sleep", args: ["10"] }, stdin: false },
      { headers: { "Connect-Timeout-Ms": "1000" } },
    );
    const seen: string[] = [];
    const failure = await (async () => {
      for await (const res of stream) seen.push(res.event?.event.case ?? "");
    })().then(
      () => undefined,
      (err: unknown) => err,
    );
    assert.ok(failure instanceof ConnectError, String(failure));
    assert.equal(failure.code, Code.DeadlineExceeded);
    assert.ok(!seen.includes("end"), seen.join());
  });

  it("sends SIGTERM on request and reports the signal", async () => {
    const client = rpc();
    const stream = client.start({ process: { cmd: "/bin/sleep", args: ["30"] }, stdin: false });
    let pid = 0;
    let end: { exitCode: number; exited: boolean; status: string } | undefined;
    for await (const res of stream) {
      const event = res.event?.event;
      if (event?.case === "start") {
        pid = event.value.pid;
        await client.sendSignal({
          process: { selector: { case: "pid", value: pid } },
          signal: Signal.SIGTERM,
        });
      } else if (event?.case === "end") end = event.value;
    }
    assert.ok(pid > 0);
    assert.deepEqual(
      { exitCode: end?.exitCode, exited: end?.exited, status: end?.status },
      { exitCode: -1, exited: false, status: "signal: terminated" },
    );
  });

  it("sends keepalive events on a quiet stream at the requested interval", async () => {
    const kinds: string[] = [];
    const stream = rpc().start(
      { process: { cmd: "/bin/sleep", args: ["2.5"] }, stdin: false },
      { headers: { "Keepalive-Ping-Interval": "1" } },
    );
    for await (const res of stream) kinds.push(res.event?.event.case ?? "none");
    assert.equal(kinds[0], "start");
    assert.equal(kinds.at(-1), "end");
    const keepalives = kinds.filter((k) => k === "keepalive").length;
    assert.ok(
      keepalives >= 1 && keepalives <= 3,
      `expected 1-3 keepalives, got ${kinds.join(",")}`,
    );
  });

  it("accepts stdin as a client stream (StreamInput)", async () => {
    const client = rpc();
    const handle = await agent.sbx.commands.run("cat", { background: true, stdin: true });
    async function* input() {
      yield {
        event: {
          case: "start" as const,
          value: { process: { selector: { case: "pid" as const, value: handle.pid } } },
        },
      };
      for (const part of ["streamed ", "input"]) {
        yield {
          event: {
            case: "data" as const,
            value: { input: { input: { case: "stdin" as const, value: Buffer.from(part) } } },
          },
        };
      }
    }
    await client.streamInput(input());
    await agent.sbx.commands.closeStdin(handle.pid);
    const result = await handle.wait();
    assert.equal(result.stdout, "streamed input");
  });

  it("finds a process by tag", async () => {
    const client = rpc();
    const controller = new AbortController();
    const stream = client.start(
      { process: { cmd: "/bin/sleep", args: ["30"] }, tag: "my-tag", stdin: false },
      { signal: controller.signal },
    );
    const first = await stream[Symbol.asyncIterator]().next();
    assert.equal(first.value?.event?.event.case, "start");
    const listed = await client.list({});
    const tagged = listed.processes.find((p) => p.tag === "my-tag");
    assert.ok(tagged, "tagged process is listed with its tag");
    controller.abort();
    await client.sendSignal({
      process: { selector: { case: "tag", value: "my-tag" } },
      signal: Signal.SIGKILL,
    });
    await assert.rejects(
      client.sendSignal({
        process: { selector: { case: "tag", value: "no-such-tag" } },
        signal: Signal.SIGKILL,
      }),
      /not found/,
    );
  });
});
