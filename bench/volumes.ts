// Volume speed vs the guest's own disk, through a real sandbox with a volume mounted
// (NFSv3 from the node, in the slot's namespace): 100 MB written (fsync'd) and read back
// with the guest's page cache dropped, 10 000 small files created, then removed. Timed
// inside the guest (date +%s%N around each step), so the API and envd add nothing.
// Run: npm run bench:volumes (as root). BENCH_ROUNDS (default 3).
import { Sandbox, Volume } from "e2b";
import { startServer } from "../test/helpers/server.js";
import { report, type Summary, summarize } from "./lib/report.js";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SMALL_FILES = 10_000;
const TARGETS = { disk: "/home/user/bench", volume: "/mnt/vol/bench" } as const;

/** A step's milliseconds, as the guest clocks it. */
async function timed(sandbox: Sandbox, script: string): Promise<number> {
  const out = await sandbox.commands.run(
    `s=$(date +%s%N); ${script}; e=$(date +%s%N); echo $(( (e - s) / 1000000 ))`,
    { user: "root", timeoutMs: 600_000 },
  );
  return Number(out.stdout.trim().split("\n").at(-1));
}

const server = await startServer();
try {
  process.env.E2B_VOLUME_API_URL = server.url;
  const volume = await Volume.create(`bench-${Date.now()}`);
  const sandbox = await Sandbox.create({
    timeoutMs: 3_600_000,
    volumeMounts: { "/mnt/vol": volume },
  });
  // Random bytes (zeros could be elided by a layer below), from memory, made once.
  await sandbox.commands.run("head -c 100M /dev/urandom > /dev/shm/src", { user: "root" });
  const samples: Record<string, number[]> = {};
  const add = (name: string, ms: number) => {
    samples[name] ??= [];
    samples[name].push(ms);
  };
  for (let round = 0; round < ROUNDS; round++) {
    for (const [where, dir] of Object.entries(TARGETS)) {
      await sandbox.commands.run(`rm -rf ${dir} && mkdir -p ${dir}`, { user: "root" });
      add(
        `${where}: write 100 MB`,
        await timed(sandbox, `dd if=/dev/shm/src of=${dir}/big bs=1M conv=fsync status=none`),
      );
      await sandbox.commands.run("sync; echo 3 > /proc/sys/vm/drop_caches", { user: "root" });
      add(`${where}: read 100 MB`, await timed(sandbox, `cat ${dir}/big > /dev/null`));
      add(
        `${where}: create ${SMALL_FILES} files`,
        await timed(
          sandbox,
          `mkdir ${dir}/small && cd ${dir}/small && for i in $(seq 1 ${SMALL_FILES}); do echo $i > f$i; done; sync`,
        ),
      );
      add(
        `${where}: remove ${SMALL_FILES} files`,
        await timed(sandbox, `rm -rf ${dir}/small; sync`),
      );
      await sandbox.commands.run(`rm -rf ${dir}`, { user: "root" });
    }
  }
  await sandbox.kill();
  await Volume.destroy(volume.volumeId);

  const rows: Summary[] = Object.entries(samples).map(([name, ms]) => summarize(name, "ms", ms));
  const p50 = (name: string) => rows.find((r) => r.name === name)?.p50 ?? Number.NaN;
  const ratios: Record<string, number> = {};
  const throughput: Record<string, number> = {};
  for (const step of [
    "write 100 MB",
    "read 100 MB",
    `create ${SMALL_FILES} files`,
    `remove ${SMALL_FILES} files`,
  ]) {
    ratios[`volume/disk ${step}`] =
      Math.round((p50(`volume: ${step}`) / p50(`disk: ${step}`)) * 100) / 100;
  }
  for (const where of Object.keys(TARGETS)) {
    throughput[`${where} write MB/s`] = Math.round(100_000 / p50(`${where}: write 100 MB`));
    throughput[`${where} read MB/s`] = Math.round(100_000 / p50(`${where}: read 100 MB`));
    throughput[`${where} files/s`] = Math.round(
      (SMALL_FILES * 1000) / p50(`${where}: create ${SMALL_FILES} files`),
    );
  }
  report("volumes", rows, { rounds: ROUNDS, ratios, throughput });
} finally {
  delete process.env.E2B_VOLUME_API_URL;
  await server.stop();
}
