import type { Catalog } from "../../catalog/index.js";
import type { GuestAgent } from "../guest/guest-agent.js";
import type { SandboxLogEntry, SandboxMetric } from "../types.js";
import type { LiveSandbox } from "./live-sandbox.js";

const MAX_METRIC_SAMPLES = 1_000;
const CONSOLE_TAIL_LINES = 200;
const MAX_ENVD_LINES = 1_000;

/** Most background samples in a row repeated from a guest's last answer: then it is asked. */
const MAX_CARRIED_SAMPLES = 5;
/** A guest whose VMM used less than this share of one CPU since its last sample was idle. */
const IDLE_CPU_SHARE = 0.01;

/**
 * One sample of a running sandbox's envd /metrics, kept with the sandbox (the last 1 000):
 * taken in the background every WARREN_METRICS_INTERVAL_MS (MetricsSampler) and when asked.
 */
export async function takeMetricsSample(agent: GuestAgent, live: LiveSandbox): Promise<void> {
  if (live.row.state !== "running" || !live.slot) return;
  const sample = await agent.metrics(
    live.slot.hostAddress,
    live.row.envdAccessToken,
    live.guestCalls?.signal,
  );
  // After the answer: what the guest spent answering is not counted as its own work next time.
  const { vm } = live;
  live.metricsMark = { vm, atMs: Date.now(), cpuMs: await vm?.cpuTimeMs(), carried: 0 };
  keep(live, {
    timestamp: new Date(),
    cpuCount: sample.cpu_count,
    cpuUsedPct: sample.cpu_used_pct,
    memUsed: sample.mem_used,
    memTotal: sample.mem_total,
    memCache: sample.mem_cache,
    diskUsed: sample.disk_used,
    diskTotal: sample.disk_total,
  });
}

/**
 * A background sample of a guest that has (nearly) not run since its last one, without
 * waking it: under TCG, answering costs an idle guest more than it spent idling, and a node
 * of hundreds of idle sandboxes would spend a core on it. Its memory and disk figures are
 * the last answer's (a guest that does not run changes neither), its CPU use the VMM's own
 * time over the interval. At most MAX_CARRIED_SAMPLES in a row; false when the guest must be
 * asked (it ran, it was never asked, or its VMM's CPU time cannot be told).
 */
export async function carryIdleSample(live: LiveSandbox): Promise<boolean> {
  const mark = live.metricsMark;
  const last = live.metrics.at(-1);
  const { vm } = live;
  if (!mark || mark.vm !== vm || mark.cpuMs === undefined || !last) return false;
  if (mark.carried >= MAX_CARRIED_SAMPLES) return false;
  const cpuMs = await vm?.cpuTimeMs();
  const now = Date.now();
  const elapsedMs = now - mark.atMs;
  if (cpuMs === undefined || elapsedMs <= 0) return false;
  const usedMs = Math.max(0, cpuMs - mark.cpuMs);
  if (usedMs >= IDLE_CPU_SHARE * elapsedMs) return false;
  const share = usedMs / (elapsedMs * Math.max(1, last.cpuCount));
  keep(live, { ...last, timestamp: new Date(now), cpuUsedPct: Math.round(share * 10_000) / 100 });
  live.metricsMark = { vm, atMs: now, cpuMs, carried: mark.carried + 1 };
  return true;
}

function keep(live: LiveSandbox, sample: SandboxMetric): void {
  live.metrics.push(sample);
  if (live.metrics.length > MAX_METRIC_SAMPLES) live.metrics.shift();
}

/** The samples kept of a sandbox within a window (either end open). */
export function metricsWithin(
  live: LiveSandbox,
  window: { start?: Date; end?: Date },
): SandboxMetric[] {
  const from = window.start?.getTime() ?? Number.NEGATIVE_INFINITY;
  const to = window.end?.getTime() ?? Number.POSITIVE_INFINITY;
  return live.metrics.filter((m) => m.timestamp.getTime() >= from && m.timestamp.getTime() <= to);
}

/**
 * Lifecycle events from the catalog and envd's own lines (fetched while it runs, kept with
 * the sandbox: the last 1 000, so a paused one shows what it logged), in time order; then the
 * tail of the guest console while it runs.
 */
export async function sandboxLogs(
  catalog: Catalog,
  agent: GuestAgent,
  live: LiveSandbox,
  options: { start?: Date; limit?: number },
): Promise<SandboxLogEntry[]> {
  const events = await catalog.listEvents(live.row.id, {
    since: options.start?.toISOString(),
    limit: options.limit,
  });
  await fetchEnvdLogs(agent, live).catch(() => {});
  const from = options.start?.getTime() ?? Number.NEGATIVE_INFINITY;
  const entries: SandboxLogEntry[] = [
    ...events.map(
      (event): SandboxLogEntry => ({
        timestamp: new Date(event.at),
        level: event.kind.endsWith("failed") || event.kind.endsWith("lost") ? "error" : "info",
        message: event.detail ? `${event.kind} ${JSON.stringify(event.detail)}` : event.kind,
        source: "lifecycle",
      }),
    ),
    ...(live.envdLog?.entries ?? []).filter((entry) => entry.timestamp.getTime() >= from),
  ].sort((a, b) => a.timestamp.getTime() - b.timestamp.getTime());
  if (live.vm) {
    // The serial console has no timestamps of its own: its lines carry the time of reading.
    const console = await live.vm.consoleTail();
    const at = new Date();
    for (const line of console.split("\n").slice(-CONSOLE_TAIL_LINES)) {
      if (line.trim())
        entries.push({ timestamp: at, level: "info", message: line, source: "console" });
    }
  }
  return options.limit ? entries.slice(-options.limit) : entries;
}

/**
 * envd's lines since the last fetched, added to what the sandbox keeps of them: those logged
 * since the sandbox began. A guest restored from a template or a fork parent holds their
 * envd's lines too (its build's commands, the parent's), which are not this sandbox's.
 */
async function fetchEnvdLogs(agent: GuestAgent, live: LiveSandbox): Promise<void> {
  if (live.row.state !== "running" || !live.slot) return;
  live.envdLog ??= { seq: 0, entries: [] };
  const kept = live.envdLog;
  const lines = await agent.logs(
    live.slot.hostAddress,
    live.row.envdAccessToken,
    kept.seq,
    live.guestCalls?.signal,
  );
  const began = Date.parse(live.row.startedAt);
  for (const line of lines) {
    kept.seq = Math.max(kept.seq, line.seq);
    if (line.timestamp < began) continue;
    kept.entries.push({
      timestamp: new Date(line.timestamp),
      level: line.level,
      message: line.message,
      source: "envd",
    });
  }
  kept.entries.splice(0, Math.max(0, kept.entries.length - MAX_ENVD_LINES));
}
