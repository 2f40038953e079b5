// `npm run bench:load`: the load test in full — WARREN_TEST_LOAD_CLIENTS × WARREN_TEST_LOAD_CYCLES
// (default 16 × 200) create/command/pause/resume/fork/kill cycles through the SDK at once
// against one server; reports each step's latency, cycles per minute, the 429s, every other
// error (there must be none) and what was left behind (nothing).
import { leakCheck, vmLeftovers } from "../test/helpers/leak-check.js";
import { listedSandboxes, runLoad } from "../test/helpers/load.js";
import { startServer } from "../test/helpers/server.js";
import { machine, report, summarize } from "./lib/report.js";

const clients = Number(process.env.WARREN_TEST_LOAD_CLIENTS ?? 16);
const cycles = Number(process.env.WARREN_TEST_LOAD_CYCLES ?? 200);

const server = await startServer();
let result: Awaited<ReturnType<typeof runLoad>>;
let listed: string[];
try {
  result = await runLoad({
    clients,
    cycles,
    onCycle: (done, total) => {
      if (done % 50 === 0 || done === total)
        process.stderr.write(`load: ${done}/${total} cycles\n`);
    },
  });
  listed = await listedSandboxes();
} finally {
  await server.stop();
}
const leftovers = [...(await vmLeftovers(`${server.dataDir}/run`)), ...(await leakCheck())];
report(
  "load",
  Object.entries(result.steps).map(([step, samples]) => summarize(step, "ms", [...samples])),
  {
    machine: machine(),
    clients,
    cyclesPerClient: cycles,
    completed: result.completed,
    refused: result.refused,
    failures: result.failures,
    durationS: Math.round(result.durationMs / 1000),
    cyclesPerMinute: Math.round((result.completed / result.durationMs) * 60_000 * 10) / 10,
    sandboxesListedAfter: listed.length,
    leftovers,
  },
);
if (result.failures.length > 0 || listed.length > 0 || leftovers.length > 0) process.exit(1);
