import type { Catalog } from "../catalog/index.js";
import type { GuestAgent } from "./guest-agent.js";
import type { LiveSandbox } from "./live-sandbox.js";
import type { SandboxLogEntry, SandboxMetric } from "./types.js";

const MAX_METRIC_SAMPLES = 1_000;
const CONSOLE_TAIL_LINES = 200;

/**
 * Metrics are sampled when asked for (envd measures CPU between calls; nothing polls an
 * idle guest) and kept per sandbox, so a window in the past answers from the samples taken.
 */
export async function sampleMetrics(
  agent: GuestAgent,
  live: LiveSandbox,
  window: { start?: Date; end?: Date },
): Promise<SandboxMetric[]> {
  if (live.row.state === "running" && live.slot) {
    const sample = await agent.metrics(
      live.slot.hostAddress,
      live.row.envdAccessToken,
      live.guestCalls?.signal,
    );
    live.metrics.push({
      timestamp: new Date(),
      cpuCount: sample.cpu_count,
      cpuUsedPct: sample.cpu_used_pct,
      memUsed: sample.mem_used,
      memTotal: sample.mem_total,
      memCache: sample.mem_cache,
      diskUsed: sample.disk_used,
      diskTotal: sample.disk_total,
    });
    if (live.metrics.length > MAX_METRIC_SAMPLES) live.metrics.shift();
  }
  const from = window.start?.getTime() ?? Number.NEGATIVE_INFINITY;
  const to = window.end?.getTime() ?? Number.POSITIVE_INFINITY;
  return live.metrics.filter((m) => m.timestamp.getTime() >= from && m.timestamp.getTime() <= to);
}

/** Lifecycle events from the catalog, then the tail of the guest console while it runs. */
export async function sandboxLogs(
  catalog: Catalog,
  live: LiveSandbox,
  options: { start?: Date; limit?: number },
): Promise<SandboxLogEntry[]> {
  const events = await catalog.listEvents(live.row.id, {
    since: options.start?.toISOString(),
    limit: options.limit,
  });
  const entries: SandboxLogEntry[] = events.map((event) => ({
    timestamp: new Date(event.at),
    level: event.kind.endsWith("failed") || event.kind.endsWith("lost") ? "error" : "info",
    message: event.detail ? `${event.kind} ${JSON.stringify(event.detail)}` : event.kind,
    source: "lifecycle",
  }));
  if (live.vm) {
    // The serial console has no timestamps of its own: its lines carry the time of reading.
    const console = live.vm.consoleTail();
    const at = new Date();
    for (const line of console.split("\n").slice(-CONSOLE_TAIL_LINES)) {
      if (line.trim())
        entries.push({ timestamp: at, level: "info", message: line, source: "console" });
    }
  }
  return options.limit ? entries.slice(-options.limit) : entries;
}
