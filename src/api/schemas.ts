/**
 * JSON schemas of the request bodies and query strings (E2B's OpenAPI shapes, as the e2b
 * 2.51 SDK's `dist/index.d.ts` declares them), with the TypeScript type each one admits.
 *
 * - Bodies are validated without coercion: `"timeout": "30"` is a 400.
 * - Unknown fields are ignored (no `additionalProperties: false`), as E2B's server does.
 * - Query values arrive as strings (or arrays when repeated): the schemas only say "one
 *   string"; `input.ts` parses numbers and dates explicitly.
 * - Ranges that depend on options (timeout ≤ max) are checked in code, not here.
 */

const stringMap = { type: "object", additionalProperties: { type: "string" } } as const;
const stringList = { type: "array", items: { type: "string" } } as const;
const seconds = { type: "integer" } as const;
const queryString = { type: "string" } as const;

/** An optional body: absent (or an empty body) reaches validation as null. */
function optionalBody<T extends { properties: object }>(schema: T) {
  return { ...schema, type: ["object", "null"] } as const;
}

// ---- create --------------------------------------------------------------------------

export interface NetworkConfigBody {
  allowOut?: string[];
  denyOut?: string[];
  allowPublicTraffic?: boolean;
  maskRequestHost?: string;
  rules?: NetworkRulesBody;
  egressProxy?: Record<string, unknown> | null;
  httpsPorts?: number[];
}

/** E2B's `network.rules`: per domain, rules of header transforms (`SandboxNetworkRule`). */
export type NetworkRulesBody = Record<
  string,
  { transform?: { headers?: Record<string, string> } }[]
>;

/** The shape alone; domains and headers are checked by the network (validateHeaderRules). */
const networkRules = {
  type: "object",
  additionalProperties: {
    type: "array",
    maxItems: 16,
    items: {
      type: "object",
      properties: {
        transform: {
          type: "object",
          properties: {
            headers: { type: "object", additionalProperties: { type: "string" } },
          },
        },
      },
    },
  },
} as const;

const networkConfig = {
  type: "object",
  properties: {
    allowOut: stringList,
    denyOut: stringList,
    allowPublicTraffic: { type: "boolean" },
    maskRequestHost: { type: "string" },
    rules: networkRules,
    egressProxy: { type: ["object", "null"] },
    httpsPorts: { type: "array", items: { type: "integer" } },
  },
} as const;

/** `NewSandboxV2`; `NewSandbox` (v1) adds `secure`. */
export interface NewSandboxBody {
  templateID?: string;
  timeout?: number;
  metadata?: Record<string, string>;
  envVars?: Record<string, string>;
  autoPause?: boolean;
  autoPauseMemory?: boolean;
  autoResume?: { enabled: boolean };
  allow_internet_access?: boolean;
  network?: NetworkConfigBody;
  mcp?: Record<string, unknown> | null;
  iam?: { tokens?: Record<string, unknown> };
  volumeMounts?: unknown[];
  /** v1 only. */
  secure?: boolean;
}

const newSandboxV2Properties = {
  templateID: { type: "string", minLength: 1 },
  timeout: seconds,
  metadata: stringMap,
  envVars: stringMap,
  autoPause: { type: "boolean" },
  autoPauseMemory: { type: "boolean" },
  autoResume: {
    type: "object",
    properties: { enabled: { type: "boolean" } },
    required: ["enabled"],
  },
  allow_internet_access: { type: "boolean" },
  network: networkConfig,
  mcp: { type: ["object", "null"] },
  iam: { type: "object", properties: { tokens: { type: "object" } } },
  volumeMounts: { type: "array" },
} as const;

export const newSandboxV2Schema = { type: "object", properties: newSandboxV2Properties } as const;

export const newSandboxV1Schema = {
  type: "object",
  properties: { ...newSandboxV2Properties, secure: { type: "boolean" } },
} as const;

// ---- lifecycle -----------------------------------------------------------------------

/** `ConnectSandbox` (v1: timeout required) and `ConnectSandboxV2` (all optional). */
export interface ConnectBody {
  timeout?: number;
  memory?: boolean;
}

const connectProperties = { timeout: seconds, memory: { type: "boolean" } } as const;

export const connectV1Schema = {
  type: "object",
  properties: connectProperties,
  required: ["timeout"],
} as const;

export const connectV2Schema = optionalBody({ properties: connectProperties });

/** `ResumedSandbox` (deprecated route). */
export interface ResumeBody {
  timeout?: number;
  autoPause?: boolean;
  memory?: boolean;
}

export const resumeSchema = optionalBody({
  properties: { timeout: seconds, autoPause: { type: "boolean" }, memory: { type: "boolean" } },
});

/** `SandboxPauseRequest`. */
export interface PauseBody {
  memory?: boolean;
}

export const pauseSchema = optionalBody({ properties: { memory: { type: "boolean" } } });

/** `SandboxTimeoutRequest`. */
export interface TimeoutBody {
  timeout: number;
}

export const timeoutSchema = {
  type: "object",
  properties: { timeout: seconds },
  required: ["timeout"],
} as const;

/** `SandboxRefreshRequest`. */
export interface RefreshBody {
  duration?: number;
}

export const refreshSchema = optionalBody({ properties: { duration: seconds } });

// ---- network -------------------------------------------------------------------------

/** `SandboxNetworkUpdateConfig`: replace-all, an omitted list is cleared. */
export interface NetworkUpdateBody {
  allowOut?: string[];
  denyOut?: string[];
  allow_internet_access?: boolean;
  rules?: NetworkRulesBody;
  egressProxy?: Record<string, unknown> | null;
}

export const networkUpdateSchema = optionalBody({
  properties: {
    allowOut: stringList,
    denyOut: stringList,
    allow_internet_access: { type: "boolean" },
    rules: networkRules,
    egressProxy: { type: ["object", "null"] },
  },
});

// ---- query strings -------------------------------------------------------------------

type Query<K extends string> = { [P in K]?: string };

export type ListV2Query = Query<
  "metadata" | "template" | "startedAfter" | "order" | "limit" | "nextToken"
> & {
  /** Comma-joined (the SDK), or repeated (`state=running&state=paused`). */
  state?: string | string[];
};

export const listV2QuerySchema = {
  type: "object",
  properties: {
    metadata: queryString,
    state: { type: ["string", "array"], items: queryString },
    template: queryString,
    startedAfter: queryString,
    order: { type: "string", enum: ["asc", "desc"] },
    limit: queryString,
    nextToken: queryString,
  },
} as const;

export type ListV1Query = Query<"metadata">;

export const listV1QuerySchema = {
  type: "object",
  properties: { metadata: queryString },
} as const;

export type MetricsQuery = Query<"start" | "end">;

export const metricsQuerySchema = {
  type: "object",
  properties: { start: queryString, end: queryString },
} as const;

export type SandboxesMetricsQuery = Query<"sandbox_ids">;

export const sandboxesMetricsQuerySchema = {
  type: "object",
  required: ["sandbox_ids"],
  properties: { sandbox_ids: queryString },
} as const;

export type LogsV1Query = Query<"start" | "limit">;

export type EventsQuery = Query<"offset" | "limit" | "orderAsc"> & {
  /** Repeated in the query string: an array. */
  types?: string | string[];
};

export const eventsQuerySchema = {
  type: "object",
  properties: {
    offset: queryString,
    limit: queryString,
    orderAsc: queryString,
    types: { anyOf: [queryString, { type: "array", items: queryString, maxItems: 16 }] },
  },
} as const;

export const logsV1QuerySchema = {
  type: "object",
  properties: { start: queryString, limit: queryString },
} as const;

export type LogsV2Query = Query<"cursor" | "limit" | "direction" | "level" | "search">;

export const logsV2QuerySchema = {
  type: "object",
  properties: {
    cursor: queryString,
    limit: queryString,
    direction: { type: "string", enum: ["forward", "backward"] },
    level: { type: "string", enum: ["debug", "info", "warn", "error"] },
    search: queryString,
  },
} as const;

export interface SandboxParams {
  sandboxID: string;
}

// ---- fork and snapshots ----------------------------------------------------------------

/** `SandboxForkRequest`, plus Warren's `metadata` for the children. */
export interface ForkBody {
  count?: number;
  timeout?: number;
  metadata?: Record<string, string>;
}

const forkProperties = {
  count: { type: "integer", minimum: 1 },
  timeout: seconds,
  metadata: stringMap,
} as const;

export const forkSchema = optionalBody({ properties: forkProperties });

/** `CreateSnapshotRequest`. */
export interface SnapshotBody {
  name?: string;
}

export const snapshotSchema = optionalBody({ properties: { name: { type: "string" } } });

export interface SnapshotsQuery {
  sandboxID?: string;
  name?: string;
  limit?: string;
  nextToken?: string;
}

export const snapshotsQuerySchema = {
  type: "object",
  properties: {
    sandboxID: { type: "string" },
    name: { type: "string" },
    limit: { type: "string" },
    nextToken: { type: "string" },
  },
} as const;

export interface TemplateParams {
  templateID: string;
}

// ---- template builds -----------------------------------------------------------------

/** `TemplateBuildRequestV3` (`alias` is its deprecated name for `name`). */
export interface BuildRequestBody {
  name?: string;
  alias?: string;
  tags?: string[];
  cpuCount?: number;
  memoryMB?: number;
  minFreeDiskMb?: number;
}

export const buildRequestSchema = {
  type: "object",
  properties: {
    name: { type: "string" },
    alias: { type: "string" },
    tags: stringList,
    cpuCount: { type: "integer" },
    memoryMB: { type: "integer" },
    minFreeDiskMb: { type: "integer" },
  },
} as const;

export interface FileParams {
  templateID: string;
  hash: string;
}

export interface BuildParams {
  templateID: string;
  buildID: string;
}

export interface BuildStatusQuery {
  logsOffset?: string;
}

export const buildStatusQuerySchema = {
  type: "object",
  properties: { logsOffset: queryString },
} as const;

export interface BuildLogsQuery {
  cursor?: string;
  limit?: string;
  direction?: string;
  level?: string;
  source?: string;
}

export const buildLogsQuerySchema = {
  type: "object",
  properties: {
    cursor: queryString,
    limit: queryString,
    direction: queryString,
    level: queryString,
    source: queryString,
  },
} as const;

export interface UploadQuery {
  expires?: string;
  signature?: string;
}

export interface TagsBody {
  tags: string[];
}

export const tagsAssignSchema = {
  type: "object",
  required: ["target", "tags"],
  properties: { target: { type: "string" }, tags: stringList },
} as const;

export const tagsRemoveSchema = {
  type: "object",
  required: ["name", "tags"],
  properties: { name: { type: "string" }, tags: stringList },
} as const;

// ---- the internal node API (gateways only; bodies typed in protocol/internal-api.ts) -----

export const captureForkSchema = {
  type: "object",
  required: ["count"],
  properties: forkProperties,
} as const;

export const spillingForkSchema = {
  type: "object",
  required: ["count", "local"],
  properties: { ...forkProperties, local: { type: "integer", minimum: 0 } },
} as const;

export interface CaptureParams extends SandboxParams {
  snapshotID: string;
}
