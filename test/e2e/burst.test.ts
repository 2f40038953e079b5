// The backpressure contract under a burst larger than the node: 40 creates at once against a
// node sized for 10 sandboxes. Every create gets a sandbox that answers a command or a 429
// with a Retry-After and a reason; no other status; the server keeps answering its health
// check meanwhile; after the kills nothing is left (useServer's leak checks). `npm run
// bench:burst` runs 1 000 and reports figures.
import assert from "node:assert/strict";
import { it } from "node:test";
import { killBurst, runBurst, summarizeBurst, watchHealth } from "../helpers/burst.js";
import { listedSandboxes } from "../helpers/load.js";
import { useServer } from "../helpers/server.js";

const ROOM = 10;
const server = useServer({ WARREN_MAX_SANDBOXES: String(ROOM) });

it(`40 creates at once against a node sized for ${ROOM}: 201s that answer, 429s with Retry-After, nothing else`, async () => {
  const { url, apiKey } = server;
  const options = { creates: 40, apiUrl: url, apiKey };
  const burst = runBurst(options);
  const [result, health] = await Promise.all([burst, watchHealth(url, burst)]);
  const summary = summarizeBurst(result);
  console.log(`# burst: ${JSON.stringify(summary)}`);
  try {
    assert.deepEqual(summary.errors, [], "only 201s that answer and 429s with Retry-After");
    assert.ok(summary.admitted >= 1 && summary.admitted <= ROOM, `admitted ${summary.admitted}`);
    assert.equal(summary.answered, summary.admitted, "every admitted sandbox answered");
    const reasons = Object.keys(summary.refused);
    for (const reason of reasons) {
      assert.match(
        reason,
        /^(capacity_exhausted|start_queue_full|start_queue_timeout|memory_pressure)$/,
      );
    }
    for (const a of result.answers.filter((x) => x.status === 429)) {
      assert.ok(Number(a.retryAfter) >= 1, `#${a.index} Retry-After ${a.retryAfter}`);
    }
    assert.ok(
      health.failed === 0 && health.checks > 0,
      "the server answered its health checks throughout",
    );
  } finally {
    await killBurst(options, result);
  }
  assert.deepEqual(await listedSandboxes(), [], "every sandbox killed");
});
