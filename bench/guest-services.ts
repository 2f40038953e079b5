// The guest services process (NFS for volumes and the egress gate, out of the root server):
// what a crash of it costs. A server, sandboxes with a volume mounted each and a policy
// listing a domain (their DNS answered by the gate, names from a DNS server of the bench's
// own); the process is killed with SIGKILL BENCH_ROUNDS times; each time: from the kill to
// the new process ready (its log line), to the first guest NFS write that completes again
// (in flight at the kill: a `hard` mount retries), to the first guest DNS lookup answered
// again (also in flight: the guest's resolver retries), and whether every VMM kept running.
// Also the process's memory (RSS) with the sandboxes' mounts and gates in use.
// Run: npm run bench:guest-services (as root). BENCH_ROUNDS (default 10), BENCH_SANDBOXES (4).
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { Sandbox, Volume } from "e2b";
import { startFakeDns } from "../test/helpers/fake-dns-server.js";
import { servicesPid, vmmPids } from "../test/helpers/guest-services.js";
import { startServer, waitFor } from "../test/helpers/server.js";
import { report, type Summary, summarize } from "./lib/report.js";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 10);
const SANDBOXES = Number(process.env.BENCH_SANDBOXES ?? 4);
/** GuestServices' healthy window (host.ts): a restart after it has no backoff. */
const HEALTHY_MS = 10_000;

function rssMiB(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, "utf8")
    .split("\n")
    .find((l) => l.startsWith("VmRSS:"));
  return Math.round(Number(line?.split(/\s+/)[1] ?? 0) / 1024);
}

/** A guest's NFS write + fsync, in ms as the guest clocks it. */
async function nfsWrite(sandbox: Sandbox, name: string): Promise<number> {
  const out = await sandbox.commands.run(
    `s=$(date +%s%N); echo x > /mnt/vol/${name} && sync /mnt/vol/${name}; e=$(date +%s%N); echo $(( (e - s) / 1000000 ))`,
    { timeoutMs: 120_000 },
  );
  return Number(out.stdout.trim().split("\n").at(-1));
}

/** Until a lookup of `name` is answered, in ms as the guest clocks it. */
async function dnsLookup(sandbox: Sandbox, name: string): Promise<number> {
  const out = await sandbox.commands.run(
    `s=$(date +%s%N); until getent hosts ${name} >/dev/null; do :; done; e=$(date +%s%N); echo $(( (e - s) / 1000000 ))`,
    { timeoutMs: 120_000 },
  );
  return Number(out.stdout.trim().split("\n").at(-1));
}

const dns = await startFakeDns((name) =>
  name.endsWith(".bench.test") ? "93.184.216.34" : undefined,
);
const server = await startServer({ WARREN_EGRESS_RESOLVER: `127.0.0.1:${dns.port}` });
try {
  process.env.E2B_VOLUME_API_URL = server.url;
  const volume = await Volume.create(`bench-services-${Date.now()}`);
  const sandboxes = await Promise.all(
    Array.from({ length: SANDBOXES }, () =>
      Sandbox.create({
        timeoutMs: 3_600_000,
        volumeMounts: { "/mnt/vol": volume },
        network: { allowOut: ["*.bench.test"] },
      }),
    ),
  );
  const samples: Record<string, number[]> = {};
  const add = (name: string, ms: number) => {
    samples[name] ??= [];
    samples[name].push(ms);
  };
  for (const sandbox of sandboxes) {
    add("NFS write + sync, healthy", await nfsWrite(sandbox, "w"));
    add("DNS lookup, healthy", await dnsLookup(sandbox, "warm.bench.test"));
  }
  const first = servicesPid(server.process.pid);
  const rss = rssMiB(first);
  let vmmsKept = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const pid = servicesPid(server.process.pid);
    const vmms = vmmPids(sandboxes.map((s) => s.sandboxId));
    const readyBefore = server.logs.filter((l) => l.msg === "guest_services.ready").length;
    // A write in flight at the kill: it completes once the new process serves the mount.
    const guest = sandboxes[round % sandboxes.length] as Sandbox;
    const writing = nfsWrite(guest, `r${round}`);
    const other = sandboxes[(round + 1) % sandboxes.length] as Sandbox;
    // The guest caches nothing (no nscd): each name is a query to the gate.
    const lookingUp = (async () => {
      await sleep(10);
      return dnsLookup(other, `r${round}.bench.test`);
    })();
    await sleep(20);
    const killedAt = performance.now();
    process.kill(pid, "SIGKILL");
    await waitFor(
      "the guest services ready again",
      () => server.logs.filter((l) => l.msg === "guest_services.ready").length > readyBefore,
    );
    add("kill → process ready", performance.now() - killedAt);
    await writing;
    add("kill → the guest's write done", performance.now() - killedAt);
    await lookingUp;
    add("kill → the guest's DNS answered", performance.now() - killedAt);
    if (JSON.stringify(vmmPids(sandboxes.map((s) => s.sandboxId))) === JSON.stringify(vmms))
      vmmsKept += 1;
    // Past the supervisor's healthy window: each kill measures a first restart, not a backoff.
    await sleep(HEALTHY_MS + 1_000);
  }
  await Promise.all(sandboxes.map((s) => s.kill()));
  await Volume.destroy(volume.volumeId);
  const rows: Summary[] = Object.entries(samples).map(([name, ms]) => summarize(name, "ms", ms));
  report("guest-services", rows, {
    rounds: ROUNDS,
    sandboxes: SANDBOXES,
    servicesRssMiB: rss,
    vmmsKeptEveryRound: `${vmmsKept}/${ROUNDS}`,
  });
} finally {
  delete process.env.E2B_VOLUME_API_URL;
  await server.stop();
  dns.close();
}
