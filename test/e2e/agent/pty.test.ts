import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { CommandExitError } from "e2b";
import { useAgentSandbox } from "../../helpers/envd.js";

const decoder = new TextDecoder();
const encode = (text: string) => new TextEncoder().encode(text);

/** Accumulates a terminal's output as text. */
function collector() {
  let text = "";
  return {
    onData: (data: Uint8Array) => {
      text += decoder.decode(data);
    },
    text: () => text,
  };
}

async function waitFor(check: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
}

describe("envd PTYs through the e2b SDK", () => {
  const agent = useAgentSandbox();

  it("creates a terminal with the requested size and TERM, and resizes it", async () => {
    const output = collector();
    const terminal = await agent.sbx.pty.create({ cols: 80, rows: 24, onData: output.onData });
    await agent.sbx.pty.sendInput(terminal.pid, encode("tput cols; echo TERM=$TERM\n"));
    await waitFor(() => output.text().includes("TERM=xterm-256color"));
    assert.match(output.text(), /\b80\b/);
    await agent.sbx.pty.resize(terminal.pid, { cols: 100, rows: 30 });
    await agent.sbx.pty.sendInput(terminal.pid, encode("tput cols; tput lines; exit\n"));
    const result = await terminal.wait();
    assert.equal(result.exitCode, 0);
    assert.match(output.text(), /\b100\b/);
    assert.match(output.text(), /\b30\b/);
  });

  it("passes envs and runs as the default user", async () => {
    const output = collector();
    const terminal = await agent.sbx.pty.create({
      cols: 80,
      rows: 24,
      envs: { ABC: "123" },
      onData: output.onData,
    });
    await agent.sbx.pty.sendInput(terminal.pid, encode("echo ABC=$ABC; whoami; exit\n"));
    assert.equal((await terminal.wait()).exitCode, 0);
    assert.match(output.text(), /ABC=123/);
    assert.match(output.text(), /\nuser\r?\n/);
  });

  it("survives a disconnect and can be reconnected", async () => {
    const first = collector();
    const terminal = await agent.sbx.pty.create({
      cols: 80,
      rows: 24,
      envs: { FOO: "bar" },
      onData: first.onData,
    });
    await agent.sbx.pty.sendInput(terminal.pid, encode("echo one-$FOO\n"));
    await waitFor(() => first.text().includes("one-bar"));
    await terminal.disconnect();

    const second = collector();
    const again = await agent.sbx.pty.connect(terminal.pid, { onData: second.onData });
    assert.equal(again.pid, terminal.pid);
    await agent.sbx.pty.sendInput(terminal.pid, encode("echo two-$FOO; exit\n"));
    assert.equal((await again.wait()).exitCode, 0);
    assert.match(first.text(), /one-bar/);
    assert.match(second.text(), /two-bar/);
    assert.doesNotMatch(second.text(), /one-bar/, "reconnect does not replay old output");
  });

  it("kills a terminal and answers false for an unknown one", async () => {
    const terminal = await agent.sbx.pty.create({ cols: 80, rows: 24, onData: () => {} });
    assert.equal(await agent.sbx.pty.kill(terminal.pid), true);
    await assert.rejects(terminal.wait(), CommandExitError);
    await assert.rejects(agent.sbx.commands.run(`kill -0 ${terminal.pid}`), CommandExitError);
    assert.equal(await agent.sbx.pty.kill(999_999), false);
  });
});
