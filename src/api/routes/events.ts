/** A team's sandbox lifecycle events: `GET /events/sandboxes`, `GET /events/sandboxes/:id`. */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { toSandboxEventJson } from "../../events/index.js";
import { LIFECYCLE_TYPES } from "../../protocol/index.js";
import type { ApiContext } from "../api-context.js";
import { callerOf } from "../caller.js";
import { checkSandboxId, invalid, queryInteger } from "../input.js";
import { type EventsQuery, eventsQuerySchema } from "../schemas.js";

/** E2B's page: 10 by default, at most 100. */
const DEFAULT_LIMIT = 10;
const MAX_LIMIT = 100;
/** Past this an offset walks more rows than a page is worth: filter by sandbox or type. */
const MAX_OFFSET = 1_000_000;
/** Types one request may name (each at most once counts). */
const KNOWN_TYPES: ReadonlySet<string> = new Set(LIFECYCLE_TYPES);

export function registerEventRoutes(app: FastifyInstance, { service }: ApiContext): void {
  app.get<{ Querystring: EventsQuery }>(
    "/events/sandboxes",
    { schema: { querystring: eventsQuerySchema } },
    async (request) => list(request),
  );

  // A sandbox's events outlive it: the parameter is not `:sandboxID`, whose hook wants the
  // sandbox live and the caller's. Another team's, an unknown id's and a long-gone one's
  // read the same (the team's events of it: none), so ids cannot be probed across teams.
  app.get<{ Params: { sandboxId: string }; Querystring: EventsQuery }>(
    "/events/sandboxes/:sandboxId",
    { schema: { querystring: eventsQuerySchema } },
    async (request) => list(request, checkSandboxId(request.params.sandboxId)),
  );

  async function list(request: FastifyRequest<{ Querystring: EventsQuery }>, sandboxId?: string) {
    const { query } = request;
    const rows = await service().lifecycleEvents({
      ...teamOf(request),
      ...(sandboxId !== undefined && { sandboxId }),
      types: typesOf(query.types),
      offset: queryInteger("offset", query.offset, { min: 0, max: MAX_OFFSET }) ?? 0,
      limit: queryInteger("limit", query.limit, { min: 1, max: MAX_LIMIT }) ?? DEFAULT_LIMIT,
      ascending: booleanOf("orderAsc", query.orderAsc) ?? false,
    });
    return rows.map(toSandboxEventJson);
  }
}

/** The caller's team; none for the admin without X-Team-ID, who sees every team's. */
function teamOf(request: FastifyRequest): { teamId?: string } {
  const { teamId } = callerOf(request);
  return teamId === undefined ? {} : { teamId };
}

/** `types`, given once or repeated (`?types=a&types=b`): each one E2B's. */
function typesOf(value: string | string[] | undefined): string[] {
  const types = value === undefined ? [] : [value].flat();
  for (const type of types) {
    if (!KNOWN_TYPES.has(type)) {
      throw invalid(
        "querystring/types",
        `has unknown type "${type.slice(0, 64)}": each must be one of ${LIFECYCLE_TYPES.join(", ")}`,
      );
    }
  }
  return [...new Set(types)];
}

function booleanOf(name: string, value: string | undefined): boolean | undefined {
  if (value === undefined) return undefined;
  if (value === "true") return true;
  if (value === "false") return false;
  throw invalid(`querystring/${name}`, "must be true or false");
}
