import { Capacity } from "./capacity.js";
import { DiskSpace } from "./disk-space.js";
import { LifecycleEvents } from "./lifecycle-events.js";
import type { NodeDrivers } from "./node-drivers.js";
import { NodeViews } from "./node-views.js";
import type { OrchestratorOptions } from "./orchestrator-options.js";
import { WarmPool } from "./pool/warm-pool.js";
import { KeptVmms } from "./sandboxes/kept-vmms.js";
import { Lifecycle } from "./sandboxes/lifecycle.js";
import { MetricsSampler } from "./sandboxes/metrics-sampler.js";
import type { RoutingOptions } from "./sandboxes/routing.js";
import { SandboxTable } from "./sandboxes/sandbox-table.js";
import { SandboxVms } from "./sandboxes/sandbox-vms.js";
import { TeamQuotas } from "./sandboxes/team-quotas.js";
import { Forks } from "./snapshots/forks.js";
import { Snapshots } from "./snapshots/snapshots.js";
import { StartQueue } from "./start-queue.js";
import { BuiltInTemplates } from "./templates/built-in-templates.js";

/**
 * A restore's /init answers in ~50-500 ms, seconds when many start at once on few cores; a
 * guest still silent after this long is stuck or hostile, and waits without its permit.
 */
const START_PERMIT_LEASE_MS = 10_000;

/** The orchestrator's parts, each owning one concern; `Orchestrator` delegates to them. */
export interface OrchestratorParts {
  readonly events: LifecycleEvents;
  readonly table: SandboxTable;
  readonly capacity: Capacity;
  readonly snapshots: Snapshots;
  readonly templates: BuiltInTemplates;
  readonly vms: SandboxVms;
  readonly kept: KeptVmms;
  readonly pool: WarmPool;
  readonly sampler: MetricsSampler;
  readonly lifecycle: Lifecycle;
  readonly forks: Forks;
  readonly views: NodeViews;
  /** What routing asks, built once: `route` runs on every proxied request. */
  readonly routing: RoutingOptions;
}

/** Wires the parts from the orchestrator's options; `routing` is what the proxy's path asks back. */
export function assembleParts(
  options: OrchestratorOptions,
  routing: Pick<RoutingOptions, "ready" | "resume">,
): OrchestratorParts {
  const { catalog, driver, slots, agent, images, layout, logger } = options;
  const drivers: NodeDrivers = { catalog, driver, slots, agent, images, layout };
  const events = new LifecycleEvents({ logger, catalog });
  const table = new SandboxTable();
  const capacity = new Capacity(options.limits);
  const starts = new StartQueue(options.maxConcurrentStarts, options.startQueue);
  const disk = new DiskSpace(layout.dataDir, options.limits.diskReserveMiB ?? 0, options.statDisk);
  const snapshots: Snapshots = new Snapshots({
    catalog,
    driver,
    layout,
    logger,
    events,
    disks: options.disks,
    shared: options.shared,
    imagesFingerprint: images.fingerprint,
    flattenDepth: options.flattenDepth,
    warmSnapshots: () => pool.readyBySnapshot().keys(),
  });
  const templates = new BuiltInTemplates({
    boot: { ...drivers, snapshots, settleMs: options.templateSettleMs, events },
    shape: options.templateShape,
    disk,
    codeInterpreter: options.codeInterpreter ?? false,
    codeInterpreterRootfs: images.codeInterpreterRootfs,
    logger,
  });
  const vms = new SandboxVms({
    ...drivers,
    logger,
    envdDeadlineMs: options.envdDeadlineMs ?? 30_000,
    snapshotDir: (id) => snapshots.localDir(id),
    volumes: options.volumes,
    guestCaCertificate: options.guestCaCertificate,
  });
  // Before the pool's: a reserve that does not fit takes a kept VMM's room first.
  const kept = new KeptVmms({
    keepMs: options.keptVmms?.keepMs ?? 0,
    maxKept: options.keptVmms?.maxKept ?? 0,
    release: (vm) => vms.releaseKept(vm),
    logger,
  });
  capacity.reclaimWith(() => kept.reclaimOne());
  const pool: WarmPool = new WarmPool({
    ...drivers,
    capacity,
    logger,
    events,
    guestCaCertificate: options.guestCaCertificate,
    // A refill would take CPU from creates waiting their turn, and a later create could take
    // what it warms ahead of them: none while any waits.
    busy: () => starts.queued > 0,
    ...options.pool,
  });
  const sampler = new MetricsSampler({
    table,
    agent,
    logger,
    intervalMs: options.metricsIntervalMs ?? 0,
  });
  const lifecycle = new Lifecycle({
    catalog,
    table,
    capacity,
    disk,
    vms,
    pool,
    snapshots,
    kept,
    logger,
    events,
    quotas: new TeamQuotas(options.teamLimits, () => table.values().map((l) => l.row)),
    starts,
    startPermitLeaseMs: options.startPermitLeaseMs ?? START_PERMIT_LEASE_MS,
  });
  const forks = new Forks({
    catalog,
    table,
    lifecycle,
    snapshots,
    pool,
    events,
    maxForkCount: options.maxForkCount,
    defaultTimeoutMs: options.defaultTimeoutMs,
  });
  const views = new NodeViews({ catalog, table, pool, capacity, starts });
  return {
    events,
    table,
    capacity,
    snapshots,
    templates,
    vms,
    kept,
    pool,
    sampler,
    lifecycle,
    forks,
    views,
    routing: { table, logger, ...routing },
  };
}
