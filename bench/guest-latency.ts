// Exploratory: where a command's time goes inside the guest under TCG.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { startServer } from "../test/helpers/server.js";
import { vmmProcesses } from "./lib/vmm-processes.js";

const server = await startServer({ WARREN_LOG_LEVEL: "info" });
const since = (t: number) => Math.round(performance.now() - t);
try {
  const sandbox = await Sandbox.create({ timeoutMs: 600_000 });
  for (let i = 0; i < 8; i++) {
    const t = performance.now();
    await sandbox.commands.run("echo hi");
    console.log(`echo via SDK: ${since(t)} ms`);
  }
  const script = String.raw`
ms() { echo $(( $(date +%s%N) / 1000000 )); }
t=$(ms); for i in 1 2 3 4 5 6 7 8 9 10; do /bin/true; done; echo "bash fork+exec /bin/true: $(( ($(ms)-t) ))/10 ms"
t=$(ms); for i in 1 2 3 4 5 6 7 8 9 10; do bash -c true; done; echo "bash -c true: $(( ($(ms)-t) ))/10 ms"
t=$(ms); for i in 1 2 3 4 5 6 7 8 9 10; do bash -l -c true; done; echo "bash -l -c true: $(( ($(ms)-t) ))/10 ms"
t=$(ms); for i in 1 2 3 4 5 6 7 8 9 10; do sh -c true; done; echo "sh -c true: $(( ($(ms)-t) ))/10 ms"
ps -o pid,rss,vsz,args -e | grep -v ' \[' | head -20
cat /proc/$(pgrep -f envd | head -1)/status | grep -i 'vm\|rss'
`;
  const r = await sandbox.commands.run(script);
  console.log(r.stdout, r.stderr);
  const node = await sandbox.commands.run(
    `node -e "const {spawnSync,spawn}=require('child_process'); let t=Date.now(); for(let i=0;i<10;i++) spawnSync('/bin/true'); console.log('fresh node spawnSync /bin/true', (Date.now()-t)/10, 'ms'); const big=[]; for(let i=0;i<200000;i++) big.push({i, s:'x'+i}); t=Date.now(); for(let i=0;i<10;i++) spawnSync('/bin/true'); console.log('node with ~60MB heap spawnSync', (Date.now()-t)/10, 'ms', process.memoryUsage().rss>>20, 'MB rss')"`,
  );
  console.log(node.stdout, node.stderr);
  await sandbox.kill();

  // Where an idle VMM's PSS goes: its smaps, by mapping.
  const idle: Sandbox[] = [];
  for (let i = 0; i < 4; i++) idle.push(await Sandbox.create({ timeoutMs: 600_000 }));
  await new Promise((resolve) => setTimeout(resolve, 30_000));
  for (const { pid } of vmmProcesses(join(server.dataDir, "run"))) {
    const maps = readFileSync(`/proc/${pid}/smaps`, "utf8").split("\n");
    const byMapping: { name: string; sizeKiB: number; pssKiB: number; anonKiB: number }[] = [];
    let current: { name: string; sizeKiB: number; pssKiB: number; anonKiB: number } | undefined;
    for (const line of maps) {
      const head = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
      if (head) {
        current = { name: head[1] || "[anon]", sizeKiB: 0, pssKiB: 0, anonKiB: 0 };
        byMapping.push(current);
        continue;
      }
      const field = /^(Size|Pss|Anonymous):\s+(\d+) kB/.exec(line);
      if (field && current) {
        const kib = Number(field[2]);
        if (field[1] === "Size") current.sizeKiB = kib;
        else if (field[1] === "Pss") current.pssKiB = kib;
        else current.anonKiB = kib;
      }
    }
    const total = byMapping.reduce((sum, m) => sum + m.pssKiB, 0);
    console.log(`qemu ${pid}: PSS ${Math.round(total / 1024)} MiB`);
    for (const m of byMapping.sort((a, b) => b.pssKiB - a.pssKiB).slice(0, 8)) {
      console.log(
        `  ${Math.round(m.pssKiB / 1024)} MiB pss, ${Math.round(m.anonKiB / 1024)} MiB anon, size ${Math.round(m.sizeKiB / 1024)} MiB: ${m.name.split("/").slice(-2).join("/")}`,
      );
    }
  }
  await Promise.all(idle.map((s) => s.kill()));
} finally {
  await server.stop();
}
