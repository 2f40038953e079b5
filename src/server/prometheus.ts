import type { IncomingMessage, ServerResponse } from "node:http";
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { NodeStats } from "../orchestrator/index.js";
import type { Logger } from "../shared/index.js";

/** Operation durations, seconds: a pooled create takes ~0.1 s, a cold boot tens. */
const DURATION_BUCKETS = [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];
const BUILD_BUCKETS = [5, 15, 30, 60, 120, 300, 600, 1800];

/**
 * The node's Prometheus metrics (`GET /metrics`). Counters and histograms follow the events
 * the orchestrator and the builds already log (`observing()` wraps their loggers: an event's
 * name and fields are the whole contract), API errors come from the API's response hook, and
 * gauges are read from the orchestrator at each scrape (`stats`).
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

  /** `logger`, counting the events the metrics follow as they are logged. */
  observing(logger: Logger): Logger {
    const observe = (fields: Record<string, unknown>, event: string) => this.#event(event, fields);
    return {
      debug: (fields, event) => logger.debug(fields, event),
      info: (fields, event) => {
        observe(fields, event);
        logger.info(fields, event);
      },
      warn: (fields, event) => {
        observe(fields, event);
        logger.warn(fields, event);
      },
      error: (fields, event) => logger.error(fields, event),
    };
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

  #event(event: string, fields: Record<string, unknown>): void {
    const seconds = typeof fields.durationMs === "number" ? fields.durationMs / 1000 : undefined;
    const done = (op: string, duration = seconds) => {
      this.#operations.inc({ op });
      if (duration !== undefined) this.#durations.observe({ op }, duration);
    };
    switch (event) {
      case "sandbox.created":
        // A fork's children are counted with the fork (warren_fork_children_total).
        if (fields.from !== "fork") done("create");
        break;
      case "sandbox.resumed":
        done("resume");
        break;
      case "sandbox.paused":
        done("pause", typeof fields.pausedMs === "number" ? fields.pausedMs / 1000 : undefined);
        break;
      case "sandbox.forked": {
        done("fork");
        const count = Number(fields.count ?? 0);
        const started = Number(fields.started ?? 0);
        this.#forkChildren.inc({ outcome: "started" }, started);
        if (count > started) this.#forkChildren.inc({ outcome: "failed" }, count - started);
        break;
      }
      case "sandbox.snapshotted":
        done("snapshot");
        break;
      case "sandbox.killed":
        this.#operations.inc({ op: "kill" });
        // "lost: the VMM exited (…)" counts as lost.
        this.#kills.inc({ reason: String(fields.reason ?? "killed").split(":")[0] as string });
        break;
      case "sandbox.vm_up":
        this.#restores.inc({ pooled: fields.pooled === true ? "true" : "false" });
        break;
      case "build.ready":
        this.#builds.inc({ status: "ready" });
        if (seconds !== undefined) this.#buildDurations.observe(seconds);
        break;
      case "build.failed":
        this.#builds.inc({ status: "error" });
        break;
    }
  }
}
