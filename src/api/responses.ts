/**
 * `SandboxInfo` and friends → E2B's JSON shapes (`Sandbox`, `SandboxDetail`,
 * `ListedSandbox`, `SandboxMetric`, `SandboxLogs`). Field names as in the e2b 2.51 SDK's
 * generated types; times RFC 3339; sizes in MiB under E2B's "MB" names.
 */
import type {
  SandboxInfo,
  SandboxLogEntry,
  SandboxMetric,
  SandboxNetworkRules,
} from "../orchestrator/index.js";

export interface ListedSandboxJson {
  sandboxID: string;
  templateID: string;
  alias?: string;
  clientID: string;
  state: "running" | "paused";
  startedAt: string;
  endAt: string;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  envdVersion: string;
  metadata: Record<string, string>;
  volumeMounts: { name: string; path: string }[];
}

/** `Sandbox`: what create, connect and resume return (plus the listed fields, for clients that read them). */
export interface SandboxJson extends ListedSandboxJson {
  /** Only for secured sandboxes. */
  envdAccessToken?: string;
  trafficAccessToken: string | null;
  domain: string | null;
}

export interface SandboxDetailJson extends ListedSandboxJson {
  envdAccessToken?: string;
  domain: string | null;
  allowInternetAccess: boolean;
  network: {
    allowOut: string[];
    denyOut: string[];
    allowPublicTraffic: boolean;
    maskRequestHost?: string;
    httpsPorts?: number[];
    rules?: SandboxNetworkRules;
  };
  lifecycle: { onTimeout: "kill" | "pause"; autoResume: boolean };
}

export function toSandboxJson(info: SandboxInfo, domain: string | null): SandboxJson {
  return {
    ...toListedSandboxJson(info),
    ...(info.envdAccessToken === undefined ? {} : { envdAccessToken: info.envdAccessToken }),
    trafficAccessToken: info.trafficAccessToken ?? null,
    domain,
  };
}

export function toListedSandboxJson(info: SandboxInfo): ListedSandboxJson {
  return {
    sandboxID: info.sandboxId,
    templateID: info.templateId,
    ...alias(info),
    clientID: info.clientId,
    state: info.state,
    startedAt: info.startedAt.toISOString(),
    endAt: info.endAt.toISOString(),
    cpuCount: info.cpuCount,
    memoryMB: info.memoryMiB,
    diskSizeMB: info.diskSizeMiB,
    envdVersion: info.envdVersion,
    metadata: { ...info.metadata },
    volumeMounts: info.volumeMounts.map(({ name, path }) => ({ name, path })),
  };
}

export function toSandboxDetailJson(info: SandboxInfo, domain: string | null): SandboxDetailJson {
  const { network, lifecycle } = info;
  return {
    ...toListedSandboxJson(info),
    ...(info.envdAccessToken === undefined ? {} : { envdAccessToken: info.envdAccessToken }),
    domain,
    allowInternetAccess: info.allowInternetAccess,
    network: {
      allowOut: [...network.allowOut],
      denyOut: [...network.denyOut],
      allowPublicTraffic: network.allowPublicTraffic,
      ...(network.maskRequestHost === undefined
        ? {}
        : { maskRequestHost: network.maskRequestHost }),
      ...(network.httpsPorts?.length ? { httpsPorts: [...network.httpsPorts] } : {}),
      ...(network.rules && { rules: network.rules }),
    },
    lifecycle: { onTimeout: lifecycle.onTimeout, autoResume: lifecycle.autoResume },
  };
}

function alias(info: SandboxInfo): { alias?: string } {
  return info.alias === undefined ? {} : { alias: info.alias };
}

export interface SandboxMetricJson {
  /** Deprecated by E2B but still read by the SDK (`new Date(metric.timestamp)`). */
  timestamp: string;
  timestampUnix: number;
  cpuCount: number;
  cpuUsedPct: number;
  memUsed: number;
  memTotal: number;
  memCache: number;
  diskUsed: number;
  diskTotal: number;
}

export function toMetricJson(metric: SandboxMetric): SandboxMetricJson {
  return {
    timestamp: metric.timestamp.toISOString(),
    timestampUnix: Math.floor(metric.timestamp.getTime() / 1000),
    cpuCount: metric.cpuCount,
    cpuUsedPct: metric.cpuUsedPct,
    memUsed: metric.memUsed,
    memTotal: metric.memTotal,
    memCache: metric.memCache,
    diskUsed: metric.diskUsed,
    diskTotal: metric.diskTotal,
  };
}

/** `SandboxLogEntry`; the source goes in `fields` (E2B's free-form labels). */
export interface LogEntryJson {
  timestamp: string;
  level: SandboxLogEntry["level"];
  message: string;
  fields: Record<string, string>;
}

export function toLogEntryJson(entry: SandboxLogEntry): LogEntryJson {
  return {
    timestamp: entry.timestamp.toISOString(),
    level: entry.level,
    message: entry.message,
    fields: { source: entry.source },
  };
}

/** `SandboxLogs` (v1): raw lines and structured entries side by side. */
export function toLogsV1Json(entries: readonly SandboxLogEntry[]): {
  logs: { timestamp: string; line: string }[];
  logEntries: LogEntryJson[];
} {
  return {
    logs: entries.map((e) => ({ timestamp: e.timestamp.toISOString(), line: e.message })),
    logEntries: entries.map(toLogEntryJson),
  };
}
