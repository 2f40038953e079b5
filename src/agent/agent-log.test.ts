import assert from "node:assert/strict";
import type { AddressInfo } from "node:net";
import { it } from "node:test";
import { AgentLog } from "./agent-log.js";
import { createAgent } from "./server.js";

it("keeps the last 1000 lines, answers what came after a seq, newest first to go when big", () => {
  const log = new AgentLog();
  for (let i = 1; i <= 1_005; i++) log.record("info", `line ${i}`);
  const all = log.after(0, Number.POSITIVE_INFINITY);
  assert.equal(all.length, 1_000);
  assert.equal(all[0]?.message, "line 6");
  assert.deepEqual(
    log.after(1_003).map((e) => [e.seq, e.message]),
    [
      [1_004, "line 1004"],
      [1_005, "line 1005"],
    ],
  );
  const small = log.after(0, 200);
  assert.ok(small.length > 0 && small.length < 10);
  assert.equal(small.at(-1)?.message, "line 1005", "the newest within the bound");
  log.record("warn", "x".repeat(5_000));
  assert.ok((log.after(1_005)[0]?.message.length ?? 0) <= 1_001, "long messages are cut");
});

it("serves its lines at /_warren/logs to the token's holder only", async (t) => {
  const agent = createAgent();
  t.after(() => agent.close());
  agent.state.accessToken = "tok";
  agent.state.log.record("info", "process 1 started as user: true");
  await new Promise<void>((resolve) => agent.server.listen(0, "127.0.0.1", resolve));
  const { port } = agent.server.address() as AddressInfo;
  const url = `http://127.0.0.1:${port}/_warren/logs?after=0`;
  assert.equal((await fetch(url)).status, 401);
  const res = await fetch(url, { headers: { "x-access-token": "tok" } });
  assert.equal(res.status, 200);
  const lines = (await res.json()) as { seq: number; message: string }[];
  assert.deepEqual(
    lines.map((l) => [l.seq, l.message]),
    [[1, "process 1 started as user: true"]],
  );
});
