/**
 * The sandbox collection: create (v1 and v2), list (v1: running only; v2: paginated),
 * get, kill.
 */
import type { FastifyInstance } from "fastify";
import type { ListFilter, PublicState } from "../../orchestrator/index.js";
import { actingTeam } from "../../tenancy/index.js";
import type { ApiContext } from "../api-context.js";
import { callerOf } from "../caller.js";
import { toCreateInput, withVolumes } from "../create-input.js";
import { invalid, queryDateTime, queryInteger } from "../input.js";
import { parseMetadataQuery } from "../metadata-query.js";
import {
  DEFAULT_PAGE_LIMIT,
  decodeNextToken,
  MAX_PAGE_LIMIT,
  type Order,
  paginate,
} from "../pagination.js";
import { toListedSandboxJson, toSandboxDetailJson, toSandboxJson } from "../responses.js";
import {
  type ListV1Query,
  type ListV2Query,
  listV1QuerySchema,
  listV2QuerySchema,
  type NewSandboxBody,
  newSandboxV1Schema,
  newSandboxV2Schema,
  type SandboxParams,
} from "../schemas.js";

export function registerSandboxRoutes(app: FastifyInstance, context: ApiContext): void {
  const { service, domain } = context;

  app.post<{ Body: NewSandboxBody }>(
    "/sandboxes",
    { schema: { body: newSandboxV1Schema } },
    async (request, reply) => {
      const team = actingTeam(callerOf(request));
      const input = toCreateInput(team, request.body, "v1", context);
      const info = await service().create(await withVolumes(input, request.body, context));
      return reply.code(201).send(toSandboxJson(info, domain));
    },
  );

  app.post<{ Body: NewSandboxBody }>(
    "/v2/sandboxes",
    { schema: { body: newSandboxV2Schema } },
    async (request, reply) => {
      const team = actingTeam(callerOf(request));
      const input = toCreateInput(team, request.body, "v2", context);
      const info = await service().create(await withVolumes(input, request.body, context));
      return reply.code(201).send(toSandboxJson(info, domain));
    },
  );

  // Deprecated v1 list: every running sandbox, no pagination.
  app.get<{ Querystring: ListV1Query }>(
    "/sandboxes",
    { schema: { querystring: listV1QuerySchema } },
    async (request) => {
      const { metadata } = request.query;
      const filter: ListFilter = {
        teamId: callerOf(request).teamId,
        states: ["running"],
        ...(metadata === undefined ? {} : { metadata: parseMetadataQuery(metadata) }),
      };
      return service().list(filter).map(toListedSandboxJson);
    },
  );

  app.get<{ Querystring: ListV2Query }>(
    "/v2/sandboxes",
    { schema: { querystring: listV2QuerySchema } },
    async (request, reply) => {
      const query = request.query;
      const order: Order = query.order === "asc" ? "asc" : "desc";
      const limit =
        queryInteger("limit", query.limit, { min: 1, max: MAX_PAGE_LIMIT }) ?? DEFAULT_PAGE_LIMIT;
      const after =
        query.nextToken === undefined || query.nextToken === ""
          ? undefined
          : decodeNextToken(query.nextToken, order);
      const { teamId } = callerOf(request);
      const filter = { ...toListFilter(query), teamId };
      const page = paginate(service().list(filter), { order, limit, after });
      if (page.nextToken !== undefined) reply.header("x-next-token", page.nextToken);
      reply.header(
        "x-total-running",
        String(service().list({ states: ["running"], teamId }).length),
      );
      return page.items.map(toListedSandboxJson);
    },
  );

  app.get<{ Params: SandboxParams }>("/sandboxes/:sandboxID", async (request) => {
    const info = service().get(request.params.sandboxID);
    return toSandboxDetailJson(info, domain);
  });

  app.delete<{ Params: SandboxParams }>("/sandboxes/:sandboxID", async (request, reply) => {
    await service().kill(request.params.sandboxID);
    return reply.code(204).send();
  });
}

const STATES: readonly PublicState[] = ["running", "paused"];

function toListFilter(query: ListV2Query): ListFilter {
  const filter: { -readonly [K in keyof ListFilter]: ListFilter[K] } = {};
  const state = [query.state ?? []].flat().join(",");
  if (state !== "") filter.states = parseStates(state);
  if (query.metadata !== undefined) filter.metadata = parseMetadataQuery(query.metadata);
  if (query.template !== undefined && query.template !== "") filter.template = query.template;
  const startedAfter = queryDateTime("startedAfter", query.startedAfter);
  if (startedAfter !== undefined) filter.startedAfter = startedAfter;
  return filter;
}

/** `state=running,paused` (the SDK joins the array with commas). */
function parseStates(raw: string): PublicState[] {
  const states = new Set<PublicState>();
  for (const part of raw.split(",")) {
    const state = STATES.find((s) => s === part);
    if (state === undefined) {
      throw invalid("querystring/state", `must be a comma-separated list of running, paused`);
    }
    states.add(state);
  }
  return [...states];
}
