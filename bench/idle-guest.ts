// Exploratory: what an idle sandbox costs over time and what its guest runs meanwhile.
// One sandbox from the default template: its VMM's PSS by kind (pss-breakdown.ts) right after
// the create, then every 15 s for a minute untouched; then, inside the guest over 30 s of
// idle, which interrupts fired and which threads (kernel threads too) used CPU; then the
// same VMM after one command. Under TCG every guest wake-up costs host CPU, and every guest
// code path run for the first time since the restore costs translated code (codeCache).
// Run: node scripts/bench.mjs idle-guest (as root).
import { join } from "node:path";
import { Sandbox } from "e2b";
import { startServer } from "../test/helpers/server.js";
import { pssBreakdown, topMappings } from "./lib/pss-breakdown.js";
import { vmmProcesses } from "./lib/vmm-processes.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const mib = (kib: number) => Math.round((kib / 1024) * 10) / 10;

/** Samples the guest for `seconds`: interrupts and per-thread CPU ticks, as deltas. */
const GUEST_SAMPLE = (seconds: number) => `
# pid/tid, name, utime + stime; one awk for all threads, so the sampling itself stays small
# (a name may hold spaces: the fields are counted from the closing parenthesis)
snap() {
  awk '{ line = $0; name = line; sub(/^[^(]*[(]/, "", name); sub(/[)] .*$/, "", name); gsub(/ /, "_", name);
         rest = line; sub(/^.*[)] /, "", rest); split(rest, r, " ");
         print FILENAME, name, r[12] + r[13] }' /proc/[0-9]*/task/[0-9]*/stat 2>/dev/null
}
grep -v CPU /proc/interrupts > /tmp/i1; snap > /tmp/s1; head -1 /proc/stat > /tmp/c1
sleep ${seconds}
grep -v CPU /proc/interrupts > /tmp/i2; snap > /tmp/s2; head -1 /proc/stat > /tmp/c2
echo "== interrupts in ${seconds} s (name: count)"
paste -d' ' /tmp/i1 /tmp/i2 | awk '{n=(NF)/2; a=0; b=0; for(i=2;i<=n;i++){if($i~/^[0-9]+$/)a+=$i}; for(i=n+2;i<=NF;i++){if($i~/^[0-9]+$/)b+=$i}; if(b-a>0) print $1, b-a, $NF}'
echo "== threads with CPU ticks (1/100 s) in ${seconds} s"
join <(sort /tmp/s1 | awk '{print $1, $NF, $2}') <(sort /tmp/s2 | awk '{print $1, $NF}') | awk '{d=$4-$2; if (d>0) print d, $3, $1}' | sort -rn | head -15
echo "== /proc/stat cpu before / after"; cat /tmp/c1 /tmp/c2
`;

// No warm pool: the sandbox is the only VMM, a restore of the template as a create finds it.
const server = await startServer({
  WARREN_LOG_LEVEL: "info",
  WARREN_POOL_SIZE: "0",
  WARREN_POOL_MAX_PER_TEMPLATE: "0",
  // BENCH_IDLE_METRICS_MS: the node's background metrics sampling (each sample wakes the guest).
  ...(process.env.BENCH_IDLE_METRICS_MS
    ? { WARREN_METRICS_INTERVAL_MS: process.env.BENCH_IDLE_METRICS_MS }
    : {}),
});
try {
  const runDir = join(server.dataDir, "run");
  const before = new Set(vmmProcesses(runDir).map((p) => p.pid));
  const sandbox = await Sandbox.create({ timeoutMs: 600_000 });
  await sleep(500);
  const vmm = vmmProcesses(runDir).find((p) => !before.has(p.pid)) ?? vmmProcesses(runDir)[0];
  if (!vmm) throw new Error("no VMM found for the sandbox");
  const show = (when: string) => {
    const b = pssBreakdown(vmm.pid);
    const ticks = vmmProcesses(runDir).find((p) => p.pid === vmm.pid)?.ticks ?? 0;
    console.log(
      `${when}: PSS ${mib(b.total)} MiB = code ${mib(b.codeCache)} + guest written ${mib(b.guestPrivate)} + guest shared ${mib(b.guestShared)} + other anon ${mib(b.otherAnon)} + files ${mib(b.files)}; CPU ${ticks / 100} s`,
    );
  };
  show("after create");
  for (let s = 15; s <= 60; s += 15) {
    await sleep(15_000);
    show(`idle ${s} s`);
  }
  const sample = await sandbox.commands.run(GUEST_SAMPLE(30), { timeoutMs: 60_000 });
  console.log(sample.stdout, sample.stderr);
  show("after the 30 s sample command");
  await sandbox.commands.run("true");
  show("after `true`");
  await sleep(15_000);
  show("15 s later");
  console.log(`its largest mappings:\n  ${topMappings(vmm.pid, 14).join("\n  ")}`);
  await sandbox.kill();
} finally {
  await server.stop();
}
