/**
 * A lifecycle event as E2B sends it: `SandboxEvent` of `GET /events/sandboxes` (camelCase,
 * `eventData`'s keys snake_case as E2B's are) and a webhook delivery's body (all snake_case,
 * as E2B's deliveries really are), from Warren's lifecycle history rows.
 */
import type { LifecycleEventRow } from "../catalog/index.js";

export interface SandboxEventJson {
  readonly id: string;
  readonly version: "v2";
  readonly type: string;
  /** Deprecated in E2B, still sent: v1 clients read them. */
  readonly eventCategory: "lifecycle";
  readonly eventLabel: string;
  readonly eventData: Readonly<Record<string, unknown>>;
  readonly timestamp: string;
  readonly sandboxId: string;
  readonly sandboxExecutionId: string;
  readonly sandboxTemplateId: string;
  readonly sandboxBuildId: string;
  readonly sandboxTeamId: string;
}

/** E2B's v1 labels (`sandbox.lifecycle.killed` → `kill`). */
const LABELS: Readonly<Record<string, string>> = {
  "sandbox.lifecycle.created": "create",
  "sandbox.lifecycle.updated": "update",
  "sandbox.lifecycle.paused": "pause",
  "sandbox.lifecycle.resumed": "resume",
  "sandbox.lifecycle.checkpointed": "checkpoint",
  "sandbox.lifecycle.killed": "kill",
};

export function toSandboxEventJson(row: LifecycleEventRow): SandboxEventJson {
  const { sandbox } = row;
  const detail = row.detail ?? {};
  return {
    id: row.id,
    version: "v2",
    type: row.lifecycle,
    eventCategory: "lifecycle",
    eventLabel: LABELS[row.lifecycle] ?? "",
    eventData: eventData(row),
    timestamp: row.at,
    sandboxId: sandbox.id,
    // Warren runs a sandbox as one execution, whatever its pauses: its id names it.
    sandboxExecutionId: sandbox.id,
    sandboxTemplateId: sandbox.templateId,
    // The snapshot it started from (a template's build is a snapshot here).
    sandboxBuildId: stringOf(detail.snapshotId) ?? sandbox.snapshotId ?? "",
    sandboxTeamId: sandbox.teamId,
  };
}

/** What E2B puts in `eventData`: the sandbox's metadata always, then per type. */
function eventData(row: LifecycleEventRow): Record<string, unknown> {
  const { sandbox } = row;
  const detail = row.detail ?? {};
  const data: Record<string, unknown> = { sandbox_metadata: sandbox.metadata };
  switch (row.lifecycle) {
    case "sandbox.lifecycle.updated":
      if (typeof detail.endAt === "string") data.set_timeout = detail.endAt;
      else data.network = detail;
      break;
    case "sandbox.lifecycle.killed":
      // A sandbox a node found lost at its restart may carry no reason: lost says it.
      data.kill_reason =
        stringOf(detail.reason) ?? (row.kind === "sandbox.lost" ? "lost" : "unknown");
      data.execution = execution(row);
      break;
    case "sandbox.lifecycle.paused":
      data.execution = execution(row);
      break;
  }
  return data;
}

/** How long the sandbox had run at the event, as E2B reports it on kills and pauses. */
function execution(row: LifecycleEventRow): Record<string, unknown> {
  const { sandbox } = row;
  return {
    started_at: sandbox.startedAt,
    vcpu_count: sandbox.vcpus,
    memory_mb: sandbox.memoryMiB,
    execution_time: Math.max(0, Date.parse(row.at) - Date.parse(sandbox.startedAt)),
  };
}

/** A webhook delivery's body: the same event, snake_case throughout. */
export interface WebhookPayload {
  readonly id: string;
  readonly version: "v2";
  readonly type: string;
  readonly timestamp: string;
  readonly event_category: "lifecycle";
  readonly event_label: string;
  readonly event_data: Readonly<Record<string, unknown>>;
  readonly sandbox_id: string;
  readonly sandbox_execution_id: string;
  readonly sandbox_template_id: string;
  readonly sandbox_build_id: string;
  readonly sandbox_team_id: string;
}

export function toWebhookPayload(row: LifecycleEventRow): WebhookPayload {
  const json = toSandboxEventJson(row);
  return {
    id: json.id,
    version: json.version,
    type: json.type,
    timestamp: json.timestamp,
    event_category: json.eventCategory,
    event_label: json.eventLabel,
    event_data: json.eventData,
    sandbox_id: json.sandboxId,
    sandbox_execution_id: json.sandboxExecutionId,
    sandbox_template_id: json.sandboxTemplateId,
    sandbox_build_id: json.sandboxBuildId,
    sandbox_team_id: json.sandboxTeamId,
  };
}

function stringOf(value: unknown): string | undefined {
  return typeof value === "string" ? value : undefined;
}
