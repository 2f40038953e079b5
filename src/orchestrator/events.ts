import type { SandboxState, TemplateRow } from "../catalog/index.js";
import type { LifecycleType } from "../protocol/index.js";
import type { ExitInfo, MachineShape, SnapshotTiming } from "../vmm/index.js";
import type { NetworkUpdate } from "./types.js";

/**
 * The lifecycle events of a node: what the orchestrator and the template builds did to a
 * sandbox, a snapshot, a template, a warm VMM or a build — each about one such thing (its
 * id in the fields) and each a step in its life (created, paused, published, warmed,
 * released, ready...). `LifecycleEvents.emit` writes each one's log line, records it in the
 * sandbox's history where the table says so, and tells its subscribers (the Prometheus
 * metrics), so that a log line, a history entry and a metric cannot drift apart.
 *
 * Not in it, plain log calls: diagnostics (a side task that failed or was slow and changed
 * nothing: `catalog.event_failed`, `sandbox.metrics_sample_failed`, `snapshot.*_failed`,
 * `pool.fill_failed`, `sandbox.init_slow_permit_released`, `snapshot_copies.over_budget`,
 * ...), the node's own start (`orchestrator.ready`, recovery's counts `recovery.*`, like
 * `server.*`), and other components' lines (`network.*`, `api`, `proxy`, `cluster.*`).
 */
export interface EventFields {
  // ---- sandboxes ----------------------------------------------------------------------------
  /** A create or fork child admitted; its VM starts next (`pooled`: a warm VMM was taken). */
  "sandbox.creating": { sandboxId: string; snapshotId: string; pooled: boolean };
  /** Its VM restored (or taken warm) and its envd initialised: ms for each part. */
  "sandbox.vm_up": { sandboxId: string; pooled: boolean; vmMs: number; initMs: number };
  /** A create from a template, or a fork child from a one-off capture, answers. */
  "sandbox.created": {
    sandboxId: string;
    snapshotId: string;
    from: "template" | "fork";
    durationMs: number;
  };
  "sandbox.paused": { sandboxId: string; keepMemory: boolean } & SnapshotTiming;
  /** `kept`: its VMM had been kept stopped since the pause (KeptVmms): a `cont`, no restore. */
  "sandbox.resumed": { sandboxId: string; durationMs: number; reboot: boolean; kept?: boolean };
  /** `reason`: killed, timeout, failed, or `lost: …` (why). */
  "sandbox.killed": { sandboxId: string; reason: string };
  /** Its VMM exited on its own while it ran: it is torn down as lost next. */
  "sandbox.vmm_died": { sandboxId: string; exit: ExitInfo };
  /** A running sandbox captured for a fork or a persistent snapshot (it runs on). */
  "sandbox.captured": {
    sandboxId: string;
    snapshotId: string;
    kind: "fork" | "named";
  } & SnapshotTiming;
  /** `count` children asked for, `started` of them started here, `spilled` left to others. */
  "sandbox.forked": {
    sandboxId: string;
    snapshotId: string;
    count: number;
    started: number;
    spilled: number;
    durationMs: number;
  };
  /** Children of a fork another node (`from`) spilled here. */
  "sandbox.fork_spill_started": {
    sandboxId: string;
    snapshotId: string;
    count: number;
    from: string | undefined;
  };
  /** A template captured from the sandbox: a persistent snapshot (`kind` "snapshot") or a build's. */
  "sandbox.snapshotted": {
    sandboxId: string;
    template: string;
    kind: TemplateRow["kind"];
    snapshotId: string;
  };
  "sandbox.network_updated": { sandboxId: string } & NetworkUpdate;
  /** Its deadline moved (setTimeout, refresh, a connect while it runs): now `endAt`. */
  "sandbox.timeout_set": { sandboxId: string; endAt: string };
  /** Found killed (or gone) in a cluster's catalog: stopped here. */
  "sandbox.reconciled": { sandboxId: string; state: SandboxState | "moved" };
  "sandbox.moved_away": { sandboxId: string };
  "sandbox.moved_here": { sandboxId: string };
  /** At start: stopped mid-pause or mid-resume with its whole state saved, now paused. */
  "sandbox.recovered_paused": { sandboxId: string; state: SandboxState; snapshotId: string };
  /** At start: stopped in `state` by the server's end, reported lost (`reason`: why, if not that). */
  "sandbox.lost": { sandboxId: string; state: SandboxState; reason?: string };
  /** At start: running in the keeper through the restart, taken back (same VMM, `pid`). */
  "sandbox.reattached": { sandboxId: string; pid: number; durationMs: number };
  /** At a stop with WARREN_ON_STOP=detach: left running in the keeper for the next server. */
  "sandbox.detached": { sandboxId: string };

  // ---- warm pools ---------------------------------------------------------------------------
  "pool.vmm_warmed": { snapshotId: string; durationMs: number };
  /** A warm VMM given up (`warming`: the one being warmed). */
  "pool.vmm_released": {
    snapshotId: string;
    /** `died`: its VMM exited while it waited (its keeper died, say). */
    reason: "memory_budget" | "idle" | "demand" | "capacity" | "died";
    warming?: boolean;
  };
  "pool.vmm_released_memory_pressure": { snapshotId: string };
  /** A deleted template's pool, gone with it. */
  "pool.forgotten": { snapshotId: string };

  // ---- templates ----------------------------------------------------------------------------
  "template.stale": { template: string; reason: string };
  "template.building": { alias: string; shape: MachineShape };
  "template.built": { template: string; durationMs: number };
  /** The replaced base template's capture, kept: something still stands on it. */
  "template.snapshot_kept": { snapshot: string };
  /** A base template an interrupted rebuild had replaced, deleted at start. */
  "template.replaced_dropped": { template: string; snapshot: string };

  // ---- snapshots ----------------------------------------------------------------------------
  /** Another node's (`from`) snapshot copied here from the shared store. */
  "snapshot.fetched": { snapshotId: string; from: string | undefined; durationMs: number };
  "snapshot.published": { snapshotId: string; durationMs: number };
  /** `layers` layers folded into one, now stacked directly `onto` its anchor. */
  "snapshot.flattened": { snapshotId: string; onto: string; layers: number; durationMs: number };
  /** A copy of another node's snapshot removed (evicted, or nothing uses it). */
  "snapshot_copies.removed": { snapshotId: string; bytes: number | undefined };

  // ---- template builds ----------------------------------------------------------------------
  "build.ready": { buildId: string; name: string; durationMs: number };
  "build.failed": { buildId: string; step: string | undefined; message: string };
}

export type EventName = keyof EventFields;

/** One event as subscribers see it: its name and its fields. */
export type LifecycleEvent = {
  [N in EventName]: { readonly name: N; readonly fields: Readonly<EventFields[N]> };
}[EventName];

export type EventLevel = "info" | "warn" | "error";

/** A sandbox's history entry for an event (`GET /sandboxes/{id}/logs`). */
export interface HistorySpec<F> {
  /** The entry's name, when not the event's. */
  readonly kind?: string;
  readonly detail: (fields: F) => Readonly<Record<string, unknown>>;
  /** The E2B lifecycle event it is, if any (`false` from the fields: this one is not). */
  readonly lifecycle?: LifecycleType | ((fields: F) => LifecycleType | false);
}

/** How one event is written. */
export interface EventSpec<F> {
  /** Its log line's level; absent: no log line (the event is in the sandbox's history only). */
  readonly level?: EventLevel;
  /** Recorded in the sandbox's history (only events about a sandbox can be). */
  readonly history?: F extends { sandboxId: string } ? HistorySpec<F> : never;
}

/**
 * Every lifecycle event: its log level and, for those in a sandbox's history, the entry's
 * detail. The log line carries the fields as given; the history entry only `detail`.
 */
export const LIFECYCLE_EVENTS = {
  "sandbox.creating": { level: "info" },
  "sandbox.vm_up": { level: "info" },
  "sandbox.created": {
    level: "info",
    history: {
      detail: ({ durationMs, snapshotId }) => ({ durationMs, snapshotId }),
      lifecycle: "sandbox.lifecycle.created",
    },
  },
  "sandbox.paused": {
    level: "info",
    history: {
      detail: ({ sandboxId: _, keepMemory, keptStopped, ...timing }) => ({
        ...timing,
        ...(!keepMemory && { keepMemory }),
        ...(keptStopped && { keptStopped }),
      }),
      lifecycle: "sandbox.lifecycle.paused",
    },
  },
  "sandbox.resumed": {
    level: "info",
    history: {
      detail: ({ durationMs, reboot, kept }) => ({
        durationMs,
        ...(reboot && { reboot }),
        ...(kept && { kept }),
      }),
      lifecycle: "sandbox.lifecycle.resumed",
    },
  },
  "sandbox.killed": {
    level: "info",
    history: { detail: ({ reason }) => ({ reason }), lifecycle: "sandbox.lifecycle.killed" },
  },
  "sandbox.vmm_died": { level: "error" },
  "sandbox.captured": { level: "info" },
  "sandbox.forked": {
    level: "info",
    history: {
      detail: ({ snapshotId, count, started, spilled }) => ({
        snapshotId,
        count,
        started,
        ...(spilled > 0 && { spilled }),
      }),
      // E2B's fork checkpoints the source; its children are each created.
      lifecycle: "sandbox.lifecycle.checkpointed",
    },
  },
  "sandbox.fork_spill_started": { level: "info" },
  "sandbox.snapshotted": {
    history: {
      detail: ({ template, snapshotId }) => ({ template, snapshotId }),
      // A persistent snapshot; a build's layers are Warren's own.
      lifecycle: ({ kind }) => kind === "snapshot" && "sandbox.lifecycle.checkpointed",
    },
  },
  "sandbox.network_updated": {
    history: {
      detail: ({ sandboxId: _, ...update }) => update,
      lifecycle: "sandbox.lifecycle.updated",
    },
  },
  "sandbox.timeout_set": {
    history: { detail: ({ endAt }) => ({ endAt }), lifecycle: "sandbox.lifecycle.updated" },
  },
  "sandbox.reconciled": { level: "warn" },
  "sandbox.moved_away": { level: "info" },
  "sandbox.moved_here": { level: "info" },
  "sandbox.recovered_paused": {
    level: "warn",
    history: {
      kind: "sandbox.recovered",
      detail: ({ state, snapshotId }) => ({ state, now: "paused", snapshotId }),
      lifecycle: "sandbox.lifecycle.paused",
    },
  },
  "sandbox.lost": {
    level: "warn",
    history: {
      detail: ({ state, reason }) => ({ state, ...(reason && { reason }) }),
      lifecycle: "sandbox.lifecycle.killed",
    },
  },
  "sandbox.reattached": {
    level: "info",
    history: { detail: ({ pid, durationMs }) => ({ pid, durationMs }) },
  },
  "sandbox.detached": { level: "info", history: { detail: () => ({}) } },
  "pool.vmm_warmed": { level: "info" },
  "pool.vmm_released": { level: "info" },
  "pool.vmm_released_memory_pressure": { level: "warn" },
  "pool.forgotten": { level: "info" },
  "template.stale": { level: "info" },
  "template.building": { level: "info" },
  "template.built": { level: "info" },
  "template.snapshot_kept": { level: "info" },
  "template.replaced_dropped": { level: "warn" },
  "snapshot.fetched": { level: "info" },
  "snapshot.published": { level: "info" },
  "snapshot.flattened": { level: "info" },
  "snapshot_copies.removed": { level: "info" },
  "build.ready": { level: "info" },
  "build.failed": { level: "warn" },
} as const satisfies { readonly [N in EventName]: EventSpec<EventFields[N]> };
