/**
 * Fork and persistent snapshots: `POST /sandboxes/:id/fork`, `POST /sandboxes/:id/snapshots`,
 * `GET /snapshots` (paginated). Deleting one is `DELETE /templates/:id` (templates.ts).
 */
import type { FastifyInstance } from "fastify";
import type { ForkInput, SnapshotInfo, SpillingForkResult } from "../../orchestrator/index.js";
import type { InternalForkChild } from "../../protocol/index.js";
import { apiErrorEntry } from "../../relay/index.js";
import { WarrenError } from "../../shared/index.js";
import type { ApiContext } from "../api-context.js";
import { callerOf } from "../caller.js";
import { optionalSecondsToMs, queryInteger } from "../input.js";
import { DEFAULT_PAGE_LIMIT, decodeNextToken, MAX_PAGE_LIMIT, paginate } from "../pagination.js";
import { toSandboxJson } from "../responses.js";
import {
  type ForkBody,
  forkSchema,
  type SandboxParams,
  type SnapshotBody,
  type SnapshotsQuery,
  snapshotSchema,
  snapshotsQuerySchema,
} from "../schemas.js";

export function registerSnapshotRoutes(app: FastifyInstance, context: ApiContext): void {
  const { service, domain, maxTimeoutMs } = context;

  app.post<{ Params: SandboxParams; Body: ForkBody | null }>(
    "/sandboxes/:sandboxID/fork",
    { schema: { body: forkSchema } },
    async (request, reply) => {
      const input = forkInput(request.body, maxTimeoutMs);
      const results = await service().fork(request.params.sandboxID, input);
      return reply.code(201).send(results.map((result) => forkResultJson(result, domain)));
    },
  );

  // E2B's proposed fork of a stored snapshot: `snapshotID` is a snapshot's id or name (as
  // `GET /snapshots` lists it, `:default` allowed), URL-encoded.
  app.post<{ Params: { snapshotID: string }; Body: ForkBody | null }>(
    "/snapshots/:snapshotID/fork",
    { schema: { body: forkSchema } },
    async (request, reply) => {
      const input = forkInput(request.body, maxTimeoutMs);
      const { snapshotID } = request.params;
      const results = await service().forkSnapshot(snapshotID, callerOf(request).teamId, input);
      return reply.code(201).send(results.map((result) => forkResultJson(result, domain)));
    },
  );

  app.post<{ Params: SandboxParams; Body: SnapshotBody | null }>(
    "/sandboxes/:sandboxID/snapshots",
    { schema: { body: snapshotSchema } },
    async (request, reply) => {
      const info = await service().createSnapshot(request.params.sandboxID, {
        name: request.body?.name,
      });
      return reply.code(201).send(toSnapshotJson(info));
    },
  );

  app.get<{ Querystring: SnapshotsQuery }>(
    "/snapshots",
    { schema: { querystring: snapshotsQuerySchema } },
    async (request, reply) => {
      const { query } = request;
      const limit =
        queryInteger("limit", query.limit, { min: 1, max: MAX_PAGE_LIMIT }) ?? DEFAULT_PAGE_LIMIT;
      const after =
        query.nextToken === undefined ? undefined : decodeNextToken(query.nextToken, "asc");
      const all = await service().listSnapshots({
        sandboxId: query.sandboxID,
        name: query.name,
        teamId: callerOf(request).teamId,
      });
      // Positions are (createdAt, template id): stable while snapshots come and go.
      const positioned = all.map((info) => ({
        info,
        startedAt: info.createdAt,
        sandboxId: info.templateId,
      }));
      const page = paginate(positioned, { order: "asc", limit, after });
      if (page.nextToken !== undefined) reply.header("x-next-token", page.nextToken);
      return page.items.map((item) => toSnapshotJson(item.info));
    },
  );
}

function toSnapshotJson(info: SnapshotInfo) {
  return { snapshotID: info.snapshotId, names: [...info.names] };
}

/** A fork request's body as the service takes it (also the internal API's forks). */
export function forkInput(body: ForkBody | null, maxTimeoutMs: number): ForkInput {
  return {
    count: body?.count ?? 1,
    timeoutMs: optionalSecondsToMs("body/timeout", body?.timeout, maxTimeoutMs),
    metadata: body?.metadata,
  };
}

/** One child of a fork as E2B's `SandboxForkResult`, or where another node starts it. */
export function forkResultJson(
  result: SpillingForkResult,
  domain: string | null,
): InternalForkChild {
  if ("sandbox" in result) return { sandbox: toSandboxJson(result.sandbox, domain) };
  if ("error" in result) {
    return { error: apiErrorEntry(new WarrenError(result.error.reason, result.error.message)) };
  }
  return { spilled: { snapshotID: result.spilled.snapshotId } };
}
