// Re-adoption after a server's death: N running sandboxes (a loop counting in each guest),
// the server killed with SIGKILL, a new one started on the same data dir; BENCH_ROUNDS times.
// Each round: from the kill to the new server ready (its `server.ready` line: host setup,
// keeper hello, recovery, base template found, pool), the re-adoption of the N sandboxes
// (`sandbox.reattached` lines: each one's own time, and all of them from the first start to
// the last), and from the kill to a command answered in each sandbox through the SDK; and
// whether every sandbox kept its QEMU (same pid) and its loop counted on.
// Run: npm run bench:reattach (as root). BENCH_SANDBOXES (default 16), BENCH_ROUNDS (3).
import { Sandbox } from "e2b";
import { qemuPidsOfVm } from "../test/helpers/leak-check.js";
import { startServer, type TestServer } from "../test/helpers/server.js";
import { report, type Summary, summarize } from "./lib/report.js";

const SANDBOXES = Number(process.env.BENCH_SANDBOXES ?? 16);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const COUNTER =
  "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /dev/shm/count; sleep 0.2; done' >/dev/null 2>&1 </dev/null &";

async function qemuOf(server: TestServer, sandboxId: string): Promise<number | undefined> {
  return (await qemuPidsOfVm(`${server.dataDir}/run`, sandboxId))[0];
}

const count = async (sandbox: Sandbox) =>
  Number((await sandbox.commands.run("cat /dev/shm/count")).stdout.trim());

let server = await startServer();
try {
  // Each restart listens on a port of its own: the SDK objects are made again after each.
  let sandboxes = await Promise.all(
    Array.from({ length: SANDBOXES }, () => Sandbox.create({ timeoutMs: 3_600_000 })),
  );
  for (const sandbox of sandboxes) await sandbox.commands.run(COUNTER);
  const samples: Record<string, number[]> = {};
  const add = (name: string, ms: number) => {
    samples[name] ??= [];
    samples[name].push(ms);
  };
  let kept = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const pids = await Promise.all(sandboxes.map((s) => qemuOf(server, s.sandboxId)));
    const counts = await Promise.all(sandboxes.map(count));
    const killedAt = performance.now();
    server.process.kill("SIGKILL");
    await server.stop();
    server = await startServer();
    add("kill → server ready", performance.now() - killedAt);
    const events = server.logs.filter((l) => l.msg === "sandbox.reattached");
    for (const event of events) add("one sandbox's re-adoption", event.durationMs as number);
    const times = events.map((l) => Number(l.time));
    if (times.length > 0) {
      // Log times are ms since the epoch: the span from the first re-adopted to the last.
      const first = Math.min(...times) - ((events[0]?.durationMs as number) ?? 0);
      add(`all ${SANDBOXES} re-adopted (first start → last done)`, Math.max(...times) - first);
    }
    const answered = await Promise.all(
      sandboxes.map(async (s) => {
        const again = await Sandbox.connect(s.sandboxId);
        const now = await count(again);
        return { ms: performance.now() - killedAt, now, again };
      }),
    );
    sandboxes = answered.map((a) => a.again);
    for (const a of answered) add("kill → command answered (SDK)", a.ms);
    const same = await Promise.all(sandboxes.map((s) => qemuOf(server, s.sandboxId)));
    const counted = answered.every((a, i) => a.now > (counts[i] ?? 0));
    if (events.length === SANDBOXES && counted && same.every((pid, i) => pid === pids[i]))
      kept += 1;
  }
  await Promise.all(sandboxes.map((s) => s.kill()));
  const rows: Summary[] = Object.entries(samples).map(([name, ms]) => summarize(name, "ms", ms));
  report("reattach", rows, {
    sandboxes: SANDBOXES,
    rounds: ROUNDS,
    everySandboxKeptItsQemuAndCountedOn: `${kept}/${ROUNDS}`,
  });
} finally {
  await server.stop();
}
