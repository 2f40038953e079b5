/**
 * Secrets (E2B's `/secrets`, with the API key): create, list (paginated), get, update (a new
 * version), delete — by id (`sec_…`) or name. No answer carries a value; the admin acts as
 * the team it names (X-Team-ID), as for volumes.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { Secrets } from "../../secrets/index.js";
import { WarrenError } from "../../shared/index.js";
import { actingTeam } from "../../tenancy/index.js";
import type { ApiContext } from "../api-context.js";
import { callerOf } from "../caller.js";
import { queryInteger } from "../input.js";

interface SecretParams {
  secretID: string;
}

const MAX_PAGE = 100;

export function registerSecretRoutes(app: FastifyInstance, context: ApiContext): void {
  const team = (request: FastifyRequest) => actingTeam(callerOf(request));

  app.get<{ Querystring: { limit?: string; nextToken?: string } }>(
    "/secrets",
    async (request, reply) => {
      const limit =
        queryInteger("limit", request.query.limit, { min: 1, max: MAX_PAGE }) ?? MAX_PAGE;
      const after = request.query.nextToken
        ? Buffer.from(request.query.nextToken, "base64url").toString("utf8")
        : undefined;
      const all = await secretsOf(context).list(team(request));
      const rest = after === undefined ? all : all.filter((s) => s.name > after);
      const page = rest.slice(0, limit);
      if (rest.length > limit) {
        reply.header(
          "X-Next-Token",
          Buffer.from((page.at(-1) as { name: string }).name).toString("base64url"),
        );
      }
      return page;
    },
  );

  app.post<{ Body: Record<string, unknown> | null }>("/secrets", async (request, reply) => {
    const body = request.body ?? {};
    return reply.code(201).send(await secretsOf(context).create(team(request), body));
  });

  app.get<{ Params: SecretParams }>("/secrets/:secretID", async (request) =>
    secretsOf(context).get(team(request), request.params.secretID),
  );

  app.post<{ Params: SecretParams; Body: Record<string, unknown> | null }>(
    "/secrets/:secretID",
    async (request) =>
      secretsOf(context).update(team(request), request.params.secretID, request.body ?? {}),
  );

  app.delete<{ Params: SecretParams }>("/secrets/:secretID", async (request, reply) => {
    await secretsOf(context).destroy(team(request), request.params.secretID);
    return reply.code(204).send();
  });
}

function secretsOf(context: ApiContext): Secrets {
  if (!context.secrets) throw new WarrenError("unavailable", "secrets are not served here");
  return context.secrets();
}
