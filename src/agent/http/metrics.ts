import { readFileSync, statfsSync } from "node:fs";
import { availableParallelism } from "node:os";
import type { EnvdMetrics } from "../../protocol/index.js";

interface CpuSample {
  readonly busy: number;
  readonly total: number;
  readonly atMs: number;
}

// Synchronous reads: /proc answers from memory at once, and the asynchronous API would wake
// libuv's thread pool in a guest that is otherwise idle (under TCG, more code to translate
// and more memory written in every sandbox the node samples in the background).
function sampleCpu(): CpuSample {
  const line = readFileSync("/proc/stat", "utf8").split("\n", 1)[0] ?? "";
  const fields = line.trim().split(/\s+/).slice(1).map(Number);
  const idle = (fields[3] ?? 0) + (fields[4] ?? 0);
  const total = fields.reduce((a, b) => a + b, 0);
  return { busy: total - idle, total, atMs: Date.now() };
}

function memInfo(): Map<string, number> {
  const map = new Map<string, number>();
  for (const line of readFileSync("/proc/meminfo", "utf8").split("\n")) {
    const match = /^(\w+):\s+(\d+)/.exec(line);
    if (match?.[1] && match[2]) map.set(match[1], Number(match[2]) * 1024);
  }
  return map;
}

/**
 * Guest resource usage for GET /metrics. CPU use is measured between calls (no background
 * sampling: an idle guest must stay idle); the first call, or one after a long gap,
 * measures over a short window instead.
 */
export class MetricsReader {
  #last: CpuSample | undefined;

  async read(): Promise<EnvdMetrics> {
    let previous = this.#last;
    if (!previous || Date.now() - previous.atMs > 60_000) {
      previous = sampleCpu();
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const current = sampleCpu();
    this.#last = current;
    const dTotal = current.total - previous.total;
    const cpuUsedPct =
      dTotal > 0 ? Math.round(((current.busy - previous.busy) / dTotal) * 10_000) / 100 : 0;

    const mem = memInfo();
    const memTotal = mem.get("MemTotal") ?? 0;
    const memAvailable = mem.get("MemAvailable") ?? 0;
    const memUsed = memTotal - memAvailable;
    const fs = statfsSync("/");
    return {
      ts: Math.floor(Date.now() / 1000),
      cpu_count: availableParallelism(),
      cpu_used_pct: cpuUsedPct,
      mem_total: memTotal,
      mem_used: memUsed,
      mem_cache: (mem.get("Cached") ?? 0) + (mem.get("Buffers") ?? 0),
      mem_total_mib: Math.floor(memTotal / 1048576),
      mem_used_mib: Math.floor(memUsed / 1048576),
      disk_total: fs.blocks * fs.bsize,
      disk_used: (fs.blocks - fs.bavail) * fs.bsize,
    };
  }
}
