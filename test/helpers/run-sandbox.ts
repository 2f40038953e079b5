import { randomInt } from "node:crypto";
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DEFAULT_BASE_CIDR, runCommand } from "../../src/network/index.js";
import { cidrContains, formatCidr, type Ipv4Cidr, parseCidr } from "../../src/network/ipv4.js";
import { qemuPidsIn, removeLeftovers } from "./leak-check.js";
import { RUN_ENV_VARS, type RunEnv } from "./run-env.js";

// The e2e tier's sandbox, made by the test command before any e2e file runs and removed
// when the run ends (also on failure or SIGINT; the next run reaps a run that was killed
// outright). Test files see it through run-env.ts.

/**
 * Guest images built for tests: outside any data dir (a run's is removed at its end, and
 * /var/lib/warren is a developer's), kept across runs, readable by the VMM account.
 * WARREN_TEST_IMAGES_DIR in the caller's environment moves it.
 */
export const TEST_IMAGES_DIR = "/var/cache/warren-test/images";
/** Runs' data dirs: on disk (memory images and disks do not belong in a tmpfs /tmp). */
const RUNS_PARENT = "/var/tmp";
const RUN_DIR_PREFIX = "warren-test-";
/** In each run's data dir: who owns it, and the names it uses (for reaping). */
const RUN_RECORD = "test-run.json";

/**
 * Addresses the network fixtures use on the host (test/helpers/network/fake-net.ts): a run's
 * block must not overlap them either.
 */
const FIXTURE_BLOCKS = ["198.51.100.0/24", "192.168.77.0/24"];

interface RunRecord {
  readonly pid: number;
  /** Start time of `pid` (/proc/<pid>/stat field 22): a reused pid is not the runner. */
  readonly startTime: string;
  readonly networkPrefix: string;
  readonly networkCidr: string;
}

/** Creates this run's data dir, network prefix and block. Reaps dead runs first. */
export async function createRunSandbox(
  imagesDir = process.env[RUN_ENV_VARS.imagesDir] || TEST_IMAGES_DIR,
): Promise<RunEnv> {
  const others = await reapDeadRuns();
  const dataDir = await mkdtemp(join(RUNS_PARENT, RUN_DIR_PREFIX));
  // The unprivileged VMM account traverses it to the runtime dirs inside.
  await chmod(dataDir, 0o711);
  await mkdir(imagesDir, { recursive: true, mode: 0o755 });
  await chmod(imagesDir, 0o755);
  const networkPrefix = await freePrefix(others.map((r) => r.networkPrefix));
  const routes = await hostRoutes();
  const networkCidr = pickRunCidr(
    [...routes, DEFAULT_BASE_CIDR, ...FIXTURE_BLOCKS, ...others.map((r) => r.networkCidr)],
    randomInt,
  );
  if (!networkCidr) {
    await rm(dataDir, { recursive: true, force: true });
    throw new Error(`no /16 in 10.202-254 or 172.16-31 is free of the host's routes`);
  }
  const record: RunRecord = {
    pid: process.pid,
    startTime: await startTime(process.pid),
    networkPrefix,
    networkCidr,
  };
  await writeFile(join(dataDir, RUN_RECORD), `${JSON.stringify(record, null, 2)}\n`);
  return { dataDir, imagesDir, networkPrefix, networkCidr };
}

/** The environment variables test files read (run-env.ts). */
export function runEnvVars(run: RunEnv): Record<string, string> {
  return {
    [RUN_ENV_VARS.dataDir]: run.dataDir,
    [RUN_ENV_VARS.imagesDir]: run.imagesDir,
    [RUN_ENV_VARS.networkPrefix]: run.networkPrefix,
    [RUN_ENV_VARS.networkCidr]: run.networkCidr,
  };
}

/**
 * Removes everything of a run: its processes still alive (test servers found by the run's
 * data dir in their environment, QEMUs by paths into it), then its namespaces, veths and
 * host rules (by its prefix), then the data dir. Returns what had been left behind.
 */
export async function removeRunSandbox(run: Pick<RunEnv, "dataDir" | "networkPrefix">) {
  const killed = await killRunProcesses(run.dataDir);
  const network = await removeLeftovers(run.networkPrefix);
  await rm(run.dataDir, { recursive: true, force: true });
  return [...killed.map((pid) => `process ${pid}`), ...network];
}

/**
 * A /16 for a run's slots that overlaps none of `taken` (routes of the host, blocks of
 * Warren's default and of other runs): from 10.202-254, else 172.16-31, starting at a
 * random candidate so that runs side by side rarely race for one. Undefined when none is free.
 */
export function pickRunCidr(
  taken: readonly string[],
  random: (max: number) => number,
): string | undefined {
  const candidates: string[] = [];
  for (let b = 202; b <= 254; b++) candidates.push(`10.${b}.0.0/16`);
  for (let b = 16; b <= 31; b++) candidates.push(`172.${b}.0.0/16`);
  const blocks = taken.map((t) => parseCidr(t)).filter((c): c is Ipv4Cidr => c !== undefined);
  const start = random(candidates.length);
  for (let i = 0; i < candidates.length; i++) {
    const text = candidates[(start + i) % candidates.length] as string;
    const block = parseCidr(text) as Ipv4Cidr;
    if (!blocks.some((b) => overlaps(b, block))) return formatCidr(block);
  }
  return undefined;
}

function overlaps(a: Ipv4Cidr, b: Ipv4Cidr): boolean {
  return cidrContains(a, b.address) || cidrContains(b, a.address);
}

/** Destinations of every IPv4 route in every table, but the default routes. */
async function hostRoutes(): Promise<string[]> {
  const { stdout } = await runCommand("ip", ["-j", "-4", "route", "show", "table", "all"]);
  const routes = JSON.parse(stdout || "[]") as { dst?: string }[];
  return routes.map((r) => r.dst ?? "").filter((dst) => dst !== "" && dst !== "default");
}

/** "wt" and four random letters or digits, used by no interface, namespace or live run. */
async function freePrefix(inUse: readonly string[]): Promise<string> {
  const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
  for (;;) {
    let prefix = "wt";
    for (let i = 0; i < 4; i++) prefix += alphabet[randomInt(alphabet.length)];
    const names = [
      ...(await readdir("/run/netns").catch(() => [] as string[])),
      ...(await readdir("/sys/class/net")),
    ];
    if (!inUse.includes(prefix) && !names.some((n) => n.startsWith(prefix))) return prefix;
  }
}

/**
 * Removes the runs whose runner is gone and of which no process is left (a runner killed
 * outright cannot clean up); returns the records of the runs still alive.
 */
async function reapDeadRuns(): Promise<RunRecord[]> {
  const alive: RunRecord[] = [];
  for (const name of await readdir(RUNS_PARENT).catch(() => [] as string[])) {
    if (!name.startsWith(RUN_DIR_PREFIX)) continue;
    const dataDir = join(RUNS_PARENT, name);
    const record = await readFile(join(dataDir, RUN_RECORD), "utf8")
      .then((text) => JSON.parse(text) as RunRecord)
      .catch(() => undefined);
    if (!record) continue; // not (yet) a run's: leave it alone
    const runnerAlive = (await startTime(record.pid)) === record.startTime;
    if (runnerAlive || (await processesOfRun(dataDir)).length > 0) {
      alive.push(record);
      continue;
    }
    const removed = await removeRunSandbox({ dataDir, networkPrefix: record.networkPrefix });
    process.stderr.write(`removed an interrupted run's ${dataDir}${summary(removed)}\n`);
  }
  return alive;
}

const KINDS: Record<string, string> = {
  process: "processes",
  netns: "namespaces",
  link: "links",
  iptables: "host rules",
};

/** " and what it left: 2 namespaces, 14 host rules": removeRunSandbox's list, counted. */
export function summary(removed: readonly string[]): string {
  const counts = new Map<string, number>();
  for (const item of removed) {
    const first = item.split(" ")[0] ?? "";
    const kind = KINDS[first] ?? first;
    counts.set(kind, (counts.get(kind) ?? 0) + 1);
  }
  const parts = [...counts].map(([kind, count]) => `${count} ${kind}`);
  return parts.length > 0 ? ` and what it left: ${parts.join(", ")}` : "";
}

/** Start time of a process (clock ticks since boot); "" when it does not exist. */
async function startTime(pid: number): Promise<string> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => "");
  // Fields after the command name (which may hold spaces) start at field 3.
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] ?? "";
}

/** Processes started for a run: its data dir in their environment (the test files and their servers). */
async function processesOfRun(dataDir: string): Promise<number[]> {
  const marker = `${RUN_ENV_VARS.dataDir}=${dataDir}`;
  const pids: number[] = [];
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    const environ = await readFile(`/proc/${entry}/environ`, "utf8").catch(() => "");
    if (environ.split("\0").includes(marker)) pids.push(Number(entry));
  }
  return pids;
}

/** SIGTERM, then SIGKILL after 10 s, to every process of the run still alive. */
async function killRunProcesses(dataDir: string): Promise<number[]> {
  const found = async () => [
    ...new Set([...(await processesOfRun(dataDir)), ...(await qemuPidsIn(dataDir))]),
  ];
  const pids = await found();
  const signal = (pid: number, name: NodeJS.Signals) => {
    try {
      process.kill(pid, name);
    } catch {
      // Already gone.
    }
  };
  for (const pid of pids) signal(pid, "SIGTERM");
  const deadline = Date.now() + 10_000;
  while ((await found()).length > 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  for (const pid of await found()) signal(pid, "SIGKILL");
  return pids;
}
