/**
 * What the template build API answers, in E2B's shapes (`TemplateRequestResponseV3`,
 * `TemplateBuildInfo`, `Template`, `TemplateWithBuilds`), and the mapping from catalog rows.
 */
import type { BuildRow, TemplateRow } from "../catalog/index.js";
import { ENVD_VERSION } from "../protocol/index.js";
import type { LogEntry } from "./build-log.js";

/** E2B's TemplateRequestResponseV3. */
export interface RequestedBuild {
  readonly templateID: string;
  readonly buildID: string;
  readonly names: string[];
  readonly tags: string[];
  readonly aliases: string[];
  readonly public: boolean;
}

/** E2B's TemplateBuildInfo. */
export interface BuildInfo {
  readonly templateID: string;
  readonly buildID: string;
  readonly status: BuildRow["status"];
  readonly logEntries: LogEntry[];
  readonly logs: string[];
  readonly reason?: { message: string; step?: string; logEntries: LogEntry[] };
}

/** E2B's Template (list item). */
export interface TemplateSummary {
  readonly templateID: string;
  readonly buildID: string;
  readonly cpuCount: number;
  readonly memoryMB: number;
  readonly diskSizeMB: number;
  readonly public: boolean;
  readonly aliases: string[];
  readonly names: string[];
  readonly createdAt: string;
  readonly updatedAt: string;
  readonly createdBy: null;
  readonly lastSpawnedAt: null;
  readonly spawnCount: number;
  readonly buildCount: number;
  readonly envdVersion: string;
  readonly buildStatus: BuildRow["status"];
}

/** E2B's TemplateWithBuilds. */
export interface TemplateDetail {
  readonly templateID: string;
  readonly public: boolean;
  readonly aliases: string[];
  readonly names: string[];
  readonly createdAt: string;
  readonly updatedAt: string;
  readonly lastSpawnedAt: null;
  readonly spawnCount: number;
  readonly builds: {
    buildID: string;
    status: BuildRow["status"];
    createdAt: string;
    updatedAt: string;
    finishedAt?: string;
    cpuCount: number;
    memoryMB: number;
    diskSizeMB: number;
    envdVersion: string;
  }[];
}

/** A template's list item: its row (absent until a first build succeeds) and its builds. */
export function summary(
  row: TemplateRow | undefined,
  builds: readonly BuildRow[],
): TemplateSummary {
  const last = builds.at(-1);
  const names = row ? [...row.aliases] : last ? [last.name] : [];
  const createdAt = row?.createdAt ?? builds[0]?.createdAt ?? new Date(0).toISOString();
  return {
    templateID: row?.id ?? last?.templateId ?? "",
    buildID: last?.id ?? row?.snapshotId ?? "",
    cpuCount: row?.vcpus ?? last?.vcpus ?? 0,
    memoryMB: row?.memoryMiB ?? last?.memoryMiB ?? 0,
    diskSizeMB: row?.diskSizeMiB ?? last?.diskSizeMiB ?? 0,
    public: false,
    aliases: names,
    names,
    createdAt,
    updatedAt: last?.updatedAt ?? createdAt,
    createdBy: null,
    lastSpawnedAt: null,
    spawnCount: 0,
    buildCount: builds.length,
    envdVersion: ENVD_VERSION,
    buildStatus: row ? "ready" : (last?.status ?? "ready"),
  };
}
