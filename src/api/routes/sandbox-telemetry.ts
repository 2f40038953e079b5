/** Sandboxes' metrics (one's series, many's latest) and logs (v1 and v2 shapes). */
import type { FastifyInstance } from "fastify";
import type { SandboxLogEntry } from "../../orchestrator/index.js";
import type { ApiContext } from "../api-context.js";
import { callerOf, ownedSandbox } from "../caller.js";
import {
  checkSandboxId,
  invalid,
  queryInteger,
  queryUnixMillis,
  queryUnixSeconds,
} from "../input.js";
import { toLogEntryJson, toLogsV1Json, toMetricJson } from "../responses.js";
import {
  type LogsV1Query,
  type LogsV2Query,
  logsV1QuerySchema,
  logsV2QuerySchema,
  type MetricsQuery,
  metricsQuerySchema,
  type SandboxesMetricsQuery,
  type SandboxParams,
  sandboxesMetricsQuerySchema,
} from "../schemas.js";

/** infra's default number of log entries per request. */
const DEFAULT_LOG_LIMIT = 1000;
const MAX_LOG_LIMIT = 10_000;
const LEVELS: readonly SandboxLogEntry["level"][] = ["debug", "info", "warn", "error"];
/** Sandboxes one `GET /sandboxes/metrics` may name (infra's page size). */
const MAX_METRICS_IDS = 100;

export function registerTelemetryRoutes(app: FastifyInstance, { service }: ApiContext): void {
  // start/end are unix seconds (the SDK rounds its Dates).
  app.get<{ Params: SandboxParams; Querystring: MetricsQuery }>(
    "/sandboxes/:sandboxID/metrics",
    { schema: { querystring: metricsQuerySchema } },
    async (request) => {
      const start = queryUnixSeconds("start", request.query.start);
      const end = queryUnixSeconds("end", request.query.end);
      if (start !== undefined && end !== undefined && start > end) {
        throw invalid("querystring/start", "must not be after end");
      }
      const window = {
        ...(start === undefined ? {} : { start }),
        ...(end === undefined ? {} : { end }),
      };
      const metrics = await service().metrics(request.params.sandboxID, window);
      return metrics.map(toMetricJson);
    },
  );

  // Many sandboxes' latest sample at once (`SandboxesWithMetrics`): ids comma-separated; one
  // the caller cannot see, not running, or whose guest does not answer is left out, as
  // infra leaves out all but the running ones.
  app.get<{ Querystring: SandboxesMetricsQuery }>(
    "/sandboxes/metrics",
    { schema: { querystring: sandboxesMetricsQuerySchema } },
    async (request) => {
      const ids = [
        ...new Set((request.query.sandbox_ids ?? "").split(",").map((id) => id.trim())),
      ].filter((id) => id !== "");
      if (ids.length === 0) throw invalid("querystring/sandbox_ids", "must name a sandbox");
      if (ids.length > MAX_METRICS_IDS) {
        throw invalid("querystring/sandbox_ids", `must name at most ${MAX_METRICS_IDS} sandboxes`);
      }
      const caller = callerOf(request);
      const since = new Date(Date.now() - 60_000);
      const latest = await Promise.all(
        ids.map(async (id) => {
          try {
            ownedSandbox(service(), caller, checkSandboxId(id));
            return (await service().metrics(id, { start: since })).at(-1);
          } catch {
            return undefined;
          }
        }),
      );
      const sandboxes: Record<string, ReturnType<typeof toMetricJson>> = {};
      ids.forEach((id, i) => {
        const metric = latest[i];
        if (metric) sandboxes[id] = toMetricJson(metric);
      });
      return { sandboxes };
    },
  );

  // Deprecated v1 logs: start in unix ms, oldest first.
  app.get<{ Params: SandboxParams; Querystring: LogsV1Query }>(
    "/sandboxes/:sandboxID/logs",
    { schema: { querystring: logsV1QuerySchema } },
    async (request) => {
      const start = queryUnixMillis("start", request.query.start);
      const limit = logLimit(request.query.limit);
      const entries = await service().logs(request.params.sandboxID, {
        ...(start === undefined ? {} : { start }),
        limit,
      });
      return toLogsV1Json(entries);
    },
  );

  // v2 logs: cursor in unix ms; forward = from the cursor on, oldest first; backward = up
  // to the cursor, newest first; level is a minimum; search a case-sensitive substring.
  app.get<{ Params: SandboxParams; Querystring: LogsV2Query }>(
    "/v2/sandboxes/:sandboxID/logs",
    { schema: { querystring: logsV2QuerySchema } },
    async (request) => {
      const query = request.query;
      const cursor = queryUnixMillis("cursor", query.cursor);
      const limit = logLimit(query.limit);
      const backward = query.direction === "backward";
      const minLevel = LEVELS.indexOf(query.level as SandboxLogEntry["level"]);
      const keep = (e: SandboxLogEntry) =>
        LEVELS.indexOf(e.level) >= minLevel &&
        (query.search === undefined || e.message.includes(query.search));
      const filtered = backward || minLevel > 0 || query.search !== undefined;
      // Filtering happens here, so the service is asked for a limit only when none applies.
      const entries = await service().logs(request.params.sandboxID, {
        ...(cursor === undefined || backward ? {} : { start: cursor }),
        ...(filtered ? {} : { limit }),
      });
      let selected = entries.filter(keep);
      if (backward) {
        selected = selected.filter((e) => cursor === undefined || e.timestamp <= cursor).reverse();
      }
      return { logs: selected.slice(0, limit).map(toLogEntryJson) };
    },
  );
}

function logLimit(raw: string | undefined): number {
  return queryInteger("limit", raw, { min: 1, max: MAX_LOG_LIMIT }) ?? DEFAULT_LOG_LIMIT;
}
