// Load: many clients at once through the real SDK, every lifecycle operation, and
// nothing left behind. CI runs WARREN_TEST_LOAD_CLIENTS × WARREN_TEST_LOAD_CYCLES (default 16 × 3);
// `npm run bench:load` runs the full 16 × 200 and reports figures.
import assert from "node:assert/strict";
import { after, it } from "node:test";
import { leakCheck, vmLeftovers } from "../helpers/leak-check.js";
import { listedSandboxes, runLoad } from "../helpers/load.js";
import { startServer, type TestServer } from "../helpers/server.js";

const CLIENTS = Number(process.env.WARREN_TEST_LOAD_CLIENTS ?? 16);
const CYCLES = Number(process.env.WARREN_TEST_LOAD_CYCLES ?? 3);

let server: TestServer | undefined;
after(async () => {
  if (server) assert.equal(await server.stop(), 0);
  assert.deepEqual(await leakCheck(), []);
});

it(`holds ${CLIENTS} clients × ${CYCLES} create/command/pause/resume/fork/kill cycles: no error but clear 429s, nothing leaked`, async () => {
  server = await startServer();
  const result = await runLoad({ clients: CLIENTS, cycles: CYCLES });
  console.log(
    `# load: ${result.completed}/${result.cycles} cycles completed, refused ${JSON.stringify(result.refused)}, ${Math.round(result.durationMs / 1000)} s`,
  );
  assert.deepEqual(result.failures, [], "no error but a 429");
  assert.ok(result.completed > 0, "some cycles went through");
  assert.deepEqual(await listedSandboxes(), [], "every sandbox killed");
  assert.equal(await server.stop(), 0);
  assert.deepEqual(await vmLeftovers(`${server.dataDir}/run`), [], "no VMM or runtime dir left");
  server = undefined;
});
