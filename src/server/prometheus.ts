import type { IncomingMessage, ServerResponse } from "node:http";
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { EventFields, EventName, EventSource, NodeStats } from "../orchestrator/index.js";

/** Operation durations, seconds: a pooled create takes ~0.1 s, a cold boot tens. */
const DURATION_BUCKETS = [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];
const BUILD_BUCKETS = [5, 15, 30, 60, 120, 300, 600, 1800];

/**
 * The node's Prometheus metrics (`GET /metrics`). Counters and histograms follow the lifecycle
 * events of the orchestrator and the builds (`follow`; the typed table in the orchestrator's
 * events.ts, mapped here event by event in `eventMetrics`), API errors come from the API's
 * response hook, and gauges are read from the orchestrator at each scrape (`stats`).
 */
export class NodeMetrics {
  readonly registry = new Registry();
  readonly #operations: Counter<"op">;
  readonly #durations: Histogram<"op">;
  readonly #restores: Counter<"pooled">;
  readonly #forkChildren: Counter<"outcome">;
  readonly #kills: Counter<"reason">;
  readonly #builds: Counter<"status">;
  readonly #buildDurations: Histogram<never>;
  readonly #apiErrors: Counter<"status" | "reason">;
  /** What each lifecycle event does to the counters and histograms (every event has one). */
  readonly eventMetrics: EventMetrics;

  constructor(stats: () => NodeStats | undefined) {
    const registry = this.registry;
    collectDefaultMetrics({ register: registry, prefix: "warren_" });
    this.#operations = new Counter({
      name: "warren_sandbox_operations_total",
      help: "Sandbox operations done: create, resume, pause, fork, snapshot, kill",
      labelNames: ["op"],
      registers: [registry],
    });
    this.#durations = new Histogram({
      name: "warren_sandbox_operation_duration_seconds",
      help: "How long create, resume, pause (the VM stopped) and fork took",
      labelNames: ["op"],
      buckets: DURATION_BUCKETS,
      registers: [registry],
    });
    this.#restores = new Counter({
      name: "warren_vm_starts_total",
      help: "VMs brought up for sandboxes, from a warm pool or restored",
      labelNames: ["pooled"],
      registers: [registry],
    });
    this.#forkChildren = new Counter({
      name: "warren_fork_children_total",
      help: "Fork children asked for, by whether they started",
      labelNames: ["outcome"],
      registers: [registry],
    });
    this.#kills = new Counter({
      name: "warren_sandbox_ends_total",
      help: "Sandboxes ended, by why (killed, timeout, lost, failed)",
      labelNames: ["reason"],
      registers: [registry],
    });
    this.#builds = new Counter({
      name: "warren_template_builds_total",
      help: "Template builds finished, by status",
      labelNames: ["status"],
      registers: [registry],
    });
    this.#buildDurations = new Histogram({
      name: "warren_template_build_duration_seconds",
      help: "How long successful template builds took",
      buckets: BUILD_BUCKETS,
      registers: [registry],
    });
    this.#apiErrors = new Counter({
      name: "warren_api_errors_total",
      help: "API answers of 400 and above, by status and reason",
      labelNames: ["status", "reason"],
      registers: [registry],
    });
    this.eventMetrics = this.#eventMetrics();
    this.#gauges(stats);
  }

  /** Gauges read from the node's stats at each scrape. */
  #gauges(stats: () => NodeStats | undefined): void {
    const registry = this.registry;
    const gauge = <L extends string>(
      name: string,
      help: string,
      labelNames: L[],
      collect: (g: Gauge<L>, now: NodeStats) => void,
    ) =>
      new Gauge<L>({
        name,
        help,
        labelNames,
        registers: [registry],
        collect() {
          this.reset();
          const now = stats();
          if (now) collect(this, now);
        },
      });
    gauge("warren_sandboxes", "Sandboxes this node holds, by state", ["state"], (g, now) => {
      for (const [state, count] of Object.entries(now.sandboxesByState)) g.set({ state }, count);
    });
    gauge("warren_pool_vms_ready", "Warmed VMMs ready to take", [], (g, now) => {
      g.set(now.pool.ready);
    });
    gauge("warren_pool_templates", "Templates with a warm pool", [], (g, now) => {
      g.set(now.pool.templates);
    });
    gauge("warren_pool_memory_mib", "Guest memory of the warmed VMMs", [], (g, now) => {
      g.set(now.pool.memoryMiB);
    });
    gauge(
      "warren_start_queue",
      "VM starts under way and waiting their turn, and the queue's bounds",
      ["kind"],
      (g, now) => {
        if (!now.starts) return;
        g.set({ kind: "starting" }, now.starts.starting);
        g.set({ kind: "queued" }, now.starts.queued);
        g.set({ kind: "concurrency" }, now.starts.concurrency);
        g.set({ kind: "max_queued" }, now.starts.maxQueued);
      },
    );
    gauge(
      "warren_capacity",
      "Admission limits and what is reserved of them",
      ["resource", "kind"],
      (g, now) => {
        const c = now.capacity;
        g.set({ resource: "sandboxes", kind: "limit" }, c.maxSandboxes);
        g.set({ resource: "sandboxes", kind: "used" }, c.sandboxes);
        g.set({ resource: "vcpus", kind: "limit" }, c.maxVcpus);
        g.set({ resource: "vcpus", kind: "used" }, c.vcpus);
        g.set({ resource: "memory_mib", kind: "limit" }, c.maxMemoryMiB);
        g.set({ resource: "memory_mib", kind: "used" }, c.memoryMiB);
      },
    );
    gauge(
      "warren_sandbox_cpu_used_percent",
      "A running sandbox's CPU use (latest sample)",
      ["sandbox_id", "template_id"],
      (g, now) => {
        for (const s of now.sandboxes) {
          if (s.cpuUsedPct !== undefined)
            g.set({ sandbox_id: s.sandboxId, template_id: s.templateId }, s.cpuUsedPct);
        }
      },
    );
    gauge(
      "warren_sandbox_memory_used_bytes",
      "A running sandbox's guest memory in use (latest sample)",
      ["sandbox_id", "template_id"],
      (g, now) => {
        for (const s of now.sandboxes) {
          if (s.memUsedBytes !== undefined)
            g.set({ sandbox_id: s.sandboxId, template_id: s.templateId }, s.memUsedBytes);
        }
      },
    );
  }

  /** Follows `source`'s lifecycle events (the orchestrator's, the builds'); returns the unfollow. */
  follow(source: EventSource): () => void {
    return source.onEvent((event) => update(this.eventMetrics, event.name, event.fields));
  }

  /** The API's answers (its response hook): errors counted by status and reason. */
  apiAnswered(status: number, reason: string | undefined): void {
    if (status >= 400) this.#apiErrors.inc({ status: String(status), reason: reason ?? "none" });
  }

  /** Answers a scrape. */
  async handle(_req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await this.registry.metrics();
    res.writeHead(200, { "content-type": this.registry.contentType, "cache-control": "no-store" });
    res.end(body);
  }

  /** What each lifecycle event does to the metrics. */
  #eventMetrics(): EventMetrics {
    const done = (op: string, durationMs?: number) => {
      this.#operations.inc({ op });
      if (durationMs !== undefined) this.#durations.observe({ op }, durationMs / 1000);
    };
    return {
      "sandbox.creating": NO_METRIC,
      "sandbox.vm_up": ({ pooled }) => this.#restores.inc({ pooled: pooled ? "true" : "false" }),
      // A fork's children are counted with the fork (warren_fork_children_total).
      "sandbox.created": ({ from, durationMs }) => {
        if (from !== "fork") done("create", durationMs);
      },
      "sandbox.paused": ({ pausedMs }) => done("pause", pausedMs),
      "sandbox.resumed": ({ durationMs }) => done("resume", durationMs),
      "sandbox.killed": ({ reason }) => {
        this.#operations.inc({ op: "kill" });
        // "lost: the VMM exited (…)" counts as lost.
        this.#kills.inc({ reason: reason.split(":")[0] as string });
      },
      "sandbox.vmm_died": NO_METRIC, // its end is the sandbox.killed that follows
      "sandbox.captured": NO_METRIC,
      "sandbox.forked": ({ count, started, durationMs }) => {
        done("fork", durationMs);
        this.#forkChildren.inc({ outcome: "started" }, started);
        if (count > started) this.#forkChildren.inc({ outcome: "failed" }, count - started);
      },
      "sandbox.fork_spill_started": NO_METRIC,
      // Persistent snapshots (the API's); a template build's layers are counted as builds.
      "sandbox.snapshotted": ({ kind }) => {
        if (kind === "snapshot") this.#operations.inc({ op: "snapshot" });
      },
      "sandbox.network_updated": NO_METRIC,
      "sandbox.timeout_set": NO_METRIC,
      "sandbox.reconciled": NO_METRIC,
      "sandbox.moved_away": NO_METRIC,
      "sandbox.moved_here": NO_METRIC,
      "sandbox.recovered_paused": NO_METRIC,
      "sandbox.lost": NO_METRIC,
      "sandbox.reattached": NO_METRIC,
      "sandbox.detached": NO_METRIC,
      "pool.vmm_warmed": NO_METRIC,
      "pool.vmm_released": NO_METRIC,
      "pool.vmm_released_memory_pressure": NO_METRIC,
      "pool.forgotten": NO_METRIC,
      "template.stale": NO_METRIC,
      "template.building": NO_METRIC,
      "template.built": NO_METRIC,
      "template.snapshot_kept": NO_METRIC,
      "template.replaced_dropped": NO_METRIC,
      "snapshot.fetched": NO_METRIC,
      "snapshot.published": NO_METRIC,
      "snapshot.flattened": NO_METRIC,
      "snapshot_copies.removed": NO_METRIC,
      "build.ready": ({ durationMs }) => {
        this.#builds.inc({ status: "ready" });
        this.#buildDurations.observe(durationMs / 1000);
      },
      "build.failed": () => this.#builds.inc({ status: "error" }),
    };
  }
}

/** An event that moves no metric (a gauge may still show its effect at the next scrape). */
export const NO_METRIC = null;

/** For each lifecycle event, the metric updates it makes, or `NO_METRIC`. */
export type EventMetrics = {
  readonly [N in EventName]: ((fields: EventFields[N]) => void) | typeof NO_METRIC;
};

function update<N extends EventName>(metrics: EventMetrics, name: N, fields: EventFields[N]) {
  metrics[name]?.(fields);
}
