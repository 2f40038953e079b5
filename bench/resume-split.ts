// Pause/resume cycles on one sandbox, printing each resume's phases (from the server's
// api.request lines): where a resume right after a pause spends its time.
// Run: node scripts/bench.mjs resume-split (as root). BENCH_CYCLES (default 10).
import { Sandbox } from "e2b";
import { startServer } from "../test/helpers/server.js";

const CYCLES = Number(process.env.BENCH_CYCLES ?? 10);
// A pause lets its VMM go (no kept VMMs): every resume is a restore, as in bench:old-vs-head.
const server = await startServer({ WARREN_LOG_LEVEL: "info", WARREN_PAUSE_KEEP_MS: "0" });
try {
  const sandbox = await Sandbox.create({ timeoutMs: 600_000 });
  await sandbox.commands.run("true");
  for (let i = 0; i < CYCLES; i++) {
    await sandbox.pause();
    if (process.env.BENCH_GAP_MS)
      await new Promise((r) => setTimeout(r, Number(process.env.BENCH_GAP_MS)));
    await sandbox.connect();
    await sandbox.commands.run("true");
  }
  await sandbox.kill();
  for (const line of server.logs) {
    if (line.msg !== "api.request" || !line.phases) continue;
    const route = String(line.route);
    if (!/connect|pause/.test(route)) continue;
    const phases = line.phases as Record<string, number>;
    const top = Object.entries(phases)
      .filter(([, ms]) => ms >= 3)
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => `${k}=${v}`)
      .join(" ");
    console.log(`${route.split("/").at(-1)} ${line.durationMs} ms: ${top}`);
  }
} finally {
  await server.stop();
}
