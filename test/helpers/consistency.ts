import { readdir, readFile, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import {
  type SandboxRow,
  type SnapshotRow,
  SqliteCatalog,
  type TemplateRow,
} from "../../src/catalog/index.js";
import type { SnapshotFileRef } from "../../src/vmm/index.js";
import { resolveFile } from "../../src/vmm/qemu/snapshot-chain.js";
import { findLeftovers } from "./leak-check.js";
import { runEnv } from "./run-env.js";

// What a server's data dir, catalog and host must agree on whenever no operation is in
// progress (after a start, between requests): the invariants a crash must not break. Each
// check returns one line per problem, naming what is wrong; [] means consistent. Written as
// a list of checks over one read of the state, so a new one (e.g. per-VM cgroups) is one
// more function in CHECKS.

/** Files a snapshot directory may hold (docs/snapshotting.md); anything else is stale. */
export const SNAPSHOT_FILES = {
  required: ["meta.json", "devstate.bin", "disk.qcow2"],
  optional: ["memory.img", "memory.diff"],
};

export interface ConsistencyOptions {
  readonly dataDir: string;
  /** The server's network prefix (default: the run's). */
  readonly networkPrefix?: string;
  /**
   * VMMs the warm pools hold (`pooledVmms` of GET /health): runtime dirs, QEMUs and slots
   * that no sandbox row names. Default 0.
   */
  readonly pooledVmms?: number;
  /** Idle network slots the server may keep ready (WARREN_SLOT_POOL_SIZE). Default 0. */
  readonly spareSlots?: number;
}

/** One read of everything the checks compare. */
export interface ServerState {
  readonly options: Required<ConsistencyOptions>;
  readonly snapshotsDir: string;
  readonly runDir: string;
  readonly sandboxes: SandboxRow[];
  readonly templates: TemplateRow[];
  readonly snapshots: SnapshotRow[];
  /** Sandboxes whose VM runs: the catalog's running rows. */
  readonly running: Set<string>;
  /** QEMU processes with files under the data dir: pid → the runtime dir (VM id) it uses. */
  readonly vmms: Map<number, string | undefined>;
  readonly runEntries: string[];
  readonly snapshotEntries: string[];
  readonly network: Awaited<ReturnType<typeof findLeftovers>>;
}

export type Check = (state: ServerState) => Promise<string[]> | string[];

/** Every check, in the order their problems are listed. */
export const CHECKS: Check[] = [
  sandboxRows,
  baseTemplate,
  snapshotGraph,
  snapshotFiles,
  runtimeDirs,
  vmmProcesses,
  networkSlots,
  vmCgroups,
];

/** Every problem found, [] when the server's state is consistent. */
export async function consistencyProblems(options: ConsistencyOptions): Promise<string[]> {
  const state = await readState(options);
  const problems: string[] = [];
  for (const check of CHECKS) problems.push(...(await check(state)));
  return problems;
}

/**
 * Checks until consistent or `timeoutMs` passed, and returns the last problems: a VMM
 * killed at start may take a moment to be gone.
 */
export async function waitConsistent(
  options: ConsistencyOptions,
  timeoutMs = 5_000,
): Promise<string[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const problems = await consistencyProblems(options);
    if (problems.length === 0 || Date.now() > deadline) return problems;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

export async function readState(options: ConsistencyOptions): Promise<ServerState> {
  const full: Required<ConsistencyOptions> = {
    networkPrefix: runEnv().networkPrefix,
    pooledVmms: 0,
    spareSlots: 0,
    ...options,
  };
  const snapshotsDir = join(full.dataDir, "snapshots");
  const runDir = join(full.dataDir, "run");
  // The server has it open too: WAL lets both read, and the reader writes nothing.
  const catalog = await SqliteCatalog.open(join(full.dataDir, "catalog.sqlite"));
  try {
    const sandboxes = await catalog.listSandboxes();
    return {
      options: full,
      snapshotsDir,
      runDir,
      sandboxes,
      templates: await catalog.listTemplates(),
      snapshots: await catalog.listSnapshots(),
      running: new Set(sandboxes.filter((s) => s.state === "running").map((s) => s.id)),
      vmms: await vmmsUnder(full.dataDir, runDir),
      runEntries: await readdir(runDir).catch(() => []),
      snapshotEntries: await readdir(snapshotsDir).catch(() => []),
      network: await findLeftovers(full.networkPrefix),
    };
  } finally {
    await catalog.close();
  }
}

/** Rows in a state only an operation in progress may leave, or holding what they must not. */
function sandboxRows(state: ServerState): string[] {
  const problems: string[] = [];
  for (const row of state.sandboxes) {
    const what = `sandbox ${row.id} (${row.state})`;
    if (!["running", "paused", "killed"].includes(row.state)) {
      problems.push(`${what} is mid-transition with nothing in progress`);
    }
    if (row.state === "killed" && row.snapshotId) {
      problems.push(`${what} still stands on snapshot ${row.snapshotId}`);
    }
    if (row.state === "paused" && !row.snapshotId) problems.push(`${what} has no snapshot`);
  }
  return problems;
}

/**
 * Built-in templates (`base`, `code-interpreter-v1`) each hold their alias: a replaced one,
 * which lost its alias to its replacement, goes with its data.
 */
function baseTemplate(state: ServerState): string[] {
  return state.templates
    .filter((t) => t.kind === "base" && t.aliases.length === 0)
    .map((t) => `template ${t.id} is a replaced built-in template, still kept`);
}

/** Every reference names a snapshot row, and every snapshot row is used by something. */
function snapshotGraph(state: ServerState): string[] {
  const problems: string[] = [];
  const ids = new Set(state.snapshots.map((s) => s.id));
  const used = new Set<string>();
  for (const row of state.sandboxes) {
    if (row.state === "killed" || !row.snapshotId) continue;
    used.add(row.snapshotId);
    if (!ids.has(row.snapshotId)) {
      problems.push(
        `sandbox ${row.id} (${row.state}) stands on missing snapshot ${row.snapshotId}`,
      );
    }
  }
  for (const template of state.templates) {
    used.add(template.snapshotId);
    if (!ids.has(template.snapshotId)) {
      problems.push(`template ${template.id} points at missing snapshot ${template.snapshotId}`);
    }
  }
  for (const snapshot of state.snapshots) {
    if (!snapshot.parentId) continue;
    used.add(snapshot.parentId);
    if (!ids.has(snapshot.parentId)) {
      problems.push(`snapshot ${snapshot.id} has missing parent ${snapshot.parentId}`);
    }
  }
  for (const snapshot of state.snapshots) {
    if (!used.has(snapshot.id)) {
      problems.push(`snapshot ${snapshot.id} (${snapshot.kind}) is stale: nothing uses it`);
    }
  }
  return problems;
}

/** Rows and directories agree both ways, and each directory holds a whole snapshot. */
async function snapshotFiles(state: ServerState): Promise<string[]> {
  const problems: string[] = [];
  const allowed = new Set([...SNAPSHOT_FILES.required, ...SNAPSHOT_FILES.optional]);
  const dirs = new Set(state.snapshots.map((s) => s.dir));
  for (const entry of state.snapshotEntries) {
    const dir = join(state.snapshotsDir, entry);
    if (!dirs.has(dir)) problems.push(`snapshot dir ${dir} has no catalog row`);
  }
  for (const snapshot of state.snapshots) {
    const what = `snapshot ${snapshot.id}`;
    if (snapshot.dir !== join(state.snapshotsDir, snapshot.id)) {
      problems.push(`${what} lives outside the snapshots dir: ${snapshot.dir}`);
    }
    const files = await readdir(snapshot.dir).catch(() => undefined);
    if (!files) {
      problems.push(`${what} has no directory ${snapshot.dir}`);
      continue;
    }
    for (const file of SNAPSHOT_FILES.required) {
      if (!files.includes(file)) problems.push(`${what} lacks ${file}`);
    }
    for (const file of files) {
      if (!allowed.has(file)) problems.push(`${what} holds an unexpected file ${file}`);
    }
    const meta = await readJson(join(snapshot.dir, "meta.json"));
    if (!meta) continue;
    // Another snapshot's image is named by that snapshot's directory, beside this one.
    const image = await resolveFile(snapshot.dir, meta.memoryImage as SnapshotFileRef, "memory")
      .then((file) => file.path)
      .catch(() => undefined);
    if (!image || !(await exists(image))) {
      problems.push(`${what}'s memory image ${JSON.stringify(meta.memoryImage)} is missing`);
    }
    if (typeof meta.memoryDiff === "string" && !files.includes(meta.memoryDiff)) {
      problems.push(`${what} lacks its memory diff ${meta.memoryDiff}`);
    }
  }
  return problems;
}

/** run/ holds one directory per running sandbox and per pooled VMM, nothing else. */
function runtimeDirs(state: ServerState): string[] {
  const problems: string[] = [];
  const entries = new Set(state.runEntries);
  for (const id of state.running) {
    if (!entries.has(id)) problems.push(`running sandbox ${id} has no runtime dir`);
  }
  const others = state.runEntries.filter((entry) => !state.running.has(entry));
  if (others.length !== state.options.pooledVmms) {
    problems.push(
      `runtime dirs of no running sandbox: ${others.length} (${others.join(", ")}), expected ${state.options.pooledVmms} pooled`,
    );
  }
  return problems;
}

/** One QEMU per running sandbox and per pooled VMM, each in its own runtime dir. */
function vmmProcesses(state: ServerState): string[] {
  const problems: string[] = [];
  const byId = new Map<string, number[]>();
  for (const [pid, id] of state.vmms) {
    const key = id ?? `(no runtime dir: pid ${pid})`;
    byId.set(key, [...(byId.get(key) ?? []), pid]);
  }
  for (const id of state.running) {
    if (!byId.has(id)) problems.push(`running sandbox ${id} has no QEMU`);
  }
  let others = 0;
  for (const [id, pids] of byId) {
    if (pids.length > 1) problems.push(`runtime dir ${id} has ${pids.length} QEMUs: ${pids}`);
    if (!state.running.has(id)) others += 1;
  }
  if (others !== state.options.pooledVmms) {
    const list = [...byId].filter(([id]) => !state.running.has(id)).map(([id, p]) => `${id}: ${p}`);
    problems.push(
      `QEMUs of no running sandbox: ${others} (${list.join("; ")}), expected ${state.options.pooledVmms} pooled`,
    );
  }
  return problems;
}

/**
 * Slots (namespace `<p>-<n>`, host veth `<p>v<n>`, host rules `<p>:<n>`) are whole, and
 * there are as many as running sandboxes and pooled VMMs, plus at most the spare ones.
 */
function networkSlots(state: ServerState): string[] {
  const problems: string[] = [];
  const p = state.options.networkPrefix;
  const indexOf = (name: string, pattern: RegExp) => pattern.exec(name)?.[1];
  const netns = new Set(
    state.network.netns.map((n) => indexOf(n, new RegExp(`^${p}-(\\d+)$`))).filter(isString),
  );
  const veths = new Set(
    state.network.links.map((l) => indexOf(l, new RegExp(`^${p}v(\\d+)$`))).filter(isString),
  );
  const rules = new Set(
    state.network.rules
      .map(([, line]) => indexOf(line, new RegExp(`--comment "?${p}:(\\d+)`)))
      .filter(isString),
  );
  for (const n of netns) if (!veths.has(n)) problems.push(`slot ${n} has no host veth`);
  for (const n of veths) if (!netns.has(n)) problems.push(`veth ${p}v${n} has no namespace`);
  for (const n of rules) if (!netns.has(n)) problems.push(`host rules ${p}:${n} have no slot`);
  const held = state.running.size + state.options.pooledVmms;
  if (netns.size < held || netns.size > held + state.options.spareSlots) {
    problems.push(
      `${netns.size} network slots for ${state.running.size} running sandboxes and ${state.options.pooledVmms} pooled VMMs (${state.options.spareSlots} spare allowed)`,
    );
  }
  return problems;
}

/**
 * One cgroup per running sandbox and per pooled VMM (`<hierarchy>/<p>-vms/<vm id>`, once per
 * hierarchy under cgroup v1), none left by a VM that is gone. A host without usable cgroups
 * has none at all.
 */
function vmCgroups(state: ServerState): string[] {
  // VMs' alone: the guest services process has a cgroup of its own (`<p>-services/…`).
  const vms = state.network.cgroups.filter((dir) => dirname(dir).endsWith("-vms"));
  const ids = new Set(vms.map((dir) => dir.slice(dir.lastIndexOf("/") + 1)));
  if (ids.size === 0) return [];
  const problems: string[] = [];
  for (const id of state.running) {
    if (!ids.has(id)) problems.push(`running sandbox ${id} has no cgroup`);
  }
  const others = [...ids].filter((id) => !state.running.has(id));
  if (others.length !== state.options.pooledVmms) {
    problems.push(
      `cgroups of no running sandbox: ${others.length} (${others.join(", ")}), expected ${state.options.pooledVmms} pooled`,
    );
  }
  return problems;
}

/** QEMU processes with a path under `dataDir`, each with the runtime dir under `runDir` it uses. */
export async function vmmsUnder(
  dataDir: string,
  runDir: string,
): Promise<Map<number, string | undefined>> {
  const quote = (path: string) => path.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const under = new RegExp(`(^|[=,:])${quote(dataDir)}/`);
  // A path in its runtime dir (`…=<dir>/disk.qcow2`), or the dir itself (`chroot=<dir>`, JSON
  // `"filename":"<dir>/…"`): a restored VM's arguments may name it no other way.
  const inRunDir = new RegExp(`(?:^|[=,:"])${quote(runDir)}/([^/,"]+)(?:[/,"]|$)`);
  const vmms = new Map<number, string | undefined>();
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const args = (await readFile(`/proc/${entry}/cmdline`, "utf8").catch(() => "")).split("\0");
    if (!args[0]?.includes("qemu-system") || !args.some((arg) => under.test(arg))) continue;
    const id = args.map((arg) => inRunDir.exec(arg)?.[1]).find(isString);
    vmms.set(Number(entry), id);
  }
  return vmms;
}

async function readJson(path: string): Promise<Record<string, unknown> | undefined> {
  try {
    return JSON.parse(await readFile(path, "utf8")) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

function isString(value: string | undefined): value is string {
  return value !== undefined;
}
