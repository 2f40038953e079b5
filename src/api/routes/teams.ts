/**
 * Teams and keys: Warren's admin routes for teams (`/admin/teams`), E2B's admin key routes
 * (`/admin/teams/{teamID}/api-keys`) and a team's own keys (`/api-keys`, E2B's shapes).
 * The raw value of a key is in the answer that makes it, and nowhere else, ever.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { ApiKeyRow, TeamRow } from "../../catalog/index.js";
import type { SandboxService } from "../../orchestrator/index.js";
import type { TeamView } from "../../protocol/index.js";
import { WarrenError } from "../../shared/index.js";
import { parseLimits, requireAdmin, type TeamAdmin } from "../../tenancy/index.js";
import type { ApiContext } from "../api-context.js";
import { callerOf } from "../caller.js";
import { queryInteger } from "../input.js";
import { maxTeamMetric, teamMetrics } from "../team-metrics.js";

interface TeamParams {
  teamID: string;
}
interface KeyParams {
  apiKeyID: string;
}
interface TeamKeyParams extends TeamParams, KeyParams {}
interface TeamBody {
  name?: unknown;
  limits?: unknown;
}
interface KeyBody {
  name?: unknown;
}

const bodySchema = { type: ["object", "null"] } as const;

/** The teams and keys, or 503 on a server that keeps none. */
function teamAdminOf(context: ApiContext): () => TeamAdmin {
  return () => {
    if (!context.teamAdmin) throw new WarrenError("unavailable", "this server keeps no teams");
    return context.teamAdmin();
  };
}

export function registerTeamRoutes(app: FastifyInstance, context: ApiContext): void {
  const admin = teamAdminOf(context);
  const adminOnly = (request: FastifyRequest) =>
    requireAdmin(callerOf(request), `${request.method} ${request.routeOptions.url}`);

  app.post<{ Body: TeamBody | null }>(
    "/admin/teams",
    { schema: { body: bodySchema } },
    async (request, reply) => {
      adminOnly(request);
      const { team, key, keyRow } = await admin().createTeam(
        request.body?.name,
        parseLimits(request.body?.limits),
      );
      return reply.code(201).send({
        ...teamJson(team, context.service()),
        apiKey: key,
        apiKeyID: keyRow.id,
      });
    },
  );

  app.get("/admin/teams", async (request) => {
    adminOnly(request);
    const teams = await admin().teams.listTeams();
    return teams.map((team) => teamJson(team, context.service()));
  });

  app.patch<{ Params: TeamParams; Body: TeamBody | null }>(
    "/admin/teams/:teamID",
    { schema: { body: bodySchema } },
    async (request) => {
      adminOnly(request);
      const body = request.body ?? {};
      const team = await admin().updateTeam(request.params.teamID, {
        name: body.name,
        ...(body.limits !== undefined && { limits: parseLimits(body.limits) }),
      });
      return teamJson(team, context.service());
    },
  );

  app.delete<{ Params: TeamParams; Querystring: { force?: string } }>(
    "/admin/teams/:teamID",
    async (request, reply) => {
      adminOnly(request);
      const force = request.query.force === "true" || request.query.force === "1";
      await admin().removeTeam(request.params.teamID, force);
      return reply.code(204).send();
    },
  );

  app.post<{ Params: TeamParams; Body: KeyBody | null }>(
    "/admin/teams/:teamID/api-keys",
    { schema: { body: bodySchema } },
    async (request, reply) => {
      adminOnly(request);
      const { row, key } = await admin().createKey(request.params.teamID, request.body?.name);
      return reply.code(201).send({ ...keyJson(row), key });
    },
  );

  app.delete<{ Params: TeamKeyParams }>(
    "/admin/teams/:teamID/api-keys/:apiKeyID",
    async (request, reply) => {
      adminOnly(request);
      await admin().team(request.params.teamID);
      await admin().deleteKey(request.params.teamID, request.params.apiKeyID);
      return reply.code(204).send();
    },
  );
  registerTeamMetricsRoutes(app, context);
  registerOwnKeyRoutes(app, context);
}

/** E2B's team metrics: the caller's own team (the admin's: any team's). */
function registerTeamMetricsRoutes(app: FastifyInstance, context: ApiContext): void {
  const admin = teamAdminOf(context);
  app.get<{ Params: TeamParams; Querystring: { start?: string; end?: string } }>(
    "/teams/:teamID/metrics",
    async (request) => {
      const { startS, endS } = metricsWindow(request.query);
      const spans = await context.service().teamHistory(await ownTeamId(request, admin));
      return teamMetrics(spans, startS, endS);
    },
  );

  app.get<{
    Params: TeamParams;
    Querystring: { start?: string; end?: string; metric?: string };
  }>("/teams/:teamID/metrics/max", async (request) => {
    const metric = METRICS[request.query.metric ?? ""];
    if (!metric) {
      throw new WarrenError(
        "invalid_argument",
        "querystring/metric must be concurrent_sandboxes or sandbox_start_rate",
      );
    }
    const { startS, endS } = metricsWindow(request.query);
    const spans = await context.service().teamHistory(await ownTeamId(request, admin));
    return maxTeamMetric(teamMetrics(spans, startS, endS), metric);
  });
}

/** A team's own keys (E2B's `/api-keys`): its key, or the admin token with X-Team-ID. */
function registerOwnKeyRoutes(app: FastifyInstance, context: ApiContext): void {
  const admin = teamAdminOf(context);
  app.get("/api-keys", async (request) => {
    return (await admin().listKeys(ownTeam(request))).map(keyJson);
  });

  app.post<{ Body: KeyBody | null }>(
    "/api-keys",
    { schema: { body: bodySchema } },
    async (request, reply) => {
      const { row, key } = await admin().createKey(ownTeam(request), request.body?.name);
      return reply.code(201).send({ ...keyJson(row), key });
    },
  );

  app.patch<{ Params: KeyParams; Body: KeyBody | null }>(
    "/api-keys/:apiKeyID",
    { schema: { body: bodySchema } },
    async (request) => {
      const row = await admin().renameKey(
        ownTeam(request),
        request.params.apiKeyID,
        request.body?.name,
      );
      return keyJson(row);
    },
  );

  app.delete<{ Params: KeyParams }>("/api-keys/:apiKeyID", async (request, reply) => {
    await admin().deleteKey(ownTeam(request), request.params.apiKeyID);
    return reply.code(204).send();
  });
}

const METRICS: Record<string, "concurrentSandboxes" | "sandboxStartRate"> = {
  concurrent_sandboxes: "concurrentSandboxes",
  sandbox_start_rate: "sandboxStartRate",
};

/** The window of a metrics query: unix seconds, default the last 15 minutes, at most 31 days. */
function metricsWindow(query: { start?: string; end?: string }): { startS: number; endS: number } {
  const nowS = Math.floor(Date.now() / 1000);
  const endS = queryInteger("end", query.end, { min: 0, max: 4_102_444_800 }) ?? nowS;
  const startS = queryInteger("start", query.start, { min: 0, max: endS }) ?? endS - 900;
  if (endS - startS > 31 * 86_400) {
    throw new WarrenError("invalid_argument", "the window from start to end is at most 31 days");
  }
  return { startS, endS };
}

/** The `{teamID}` of a metrics route: the caller's own team; another team's reads as unknown. */
async function ownTeamId(request: FastifyRequest<{ Params: TeamParams }>, admin: () => TeamAdmin) {
  const { teamID } = request.params;
  const { teamId, admin: isAdmin } = callerOf(request);
  if (teamId === teamID || (isAdmin && teamId === undefined)) {
    await admin().team(teamID);
    return teamID;
  }
  throw new WarrenError("team_not_found", `no team has the id '${teamID}'`);
}

/** The team whose keys `/api-keys` lists: the caller's; the admin must name one. */
function ownTeam(request: FastifyRequest): string {
  const { teamId } = callerOf(request);
  if (teamId === undefined) {
    throw new WarrenError(
      "invalid_argument",
      "the admin token acts for no team here: send X-Team-ID, or use /admin/teams/{teamID}/api-keys",
    );
  }
  return teamId;
}

/** A team with what it holds on this node now. */
function teamJson(team: TeamRow, service: SandboxService): TeamView {
  const usage = { sandboxes: 0, vcpus: 0, memoryMiB: 0, diskMiB: 0 };
  for (const sandbox of service.list({ teamId: team.id })) {
    usage.diskMiB += sandbox.diskSizeMiB;
    if (sandbox.state !== "running") continue;
    usage.sandboxes += 1;
    usage.vcpus += sandbox.cpuCount;
    usage.memoryMiB += sandbox.memoryMiB;
  }
  return {
    teamID: team.id,
    name: team.name,
    createdAt: team.createdAt,
    limits: team.limits,
    usage,
  };
}

/** E2B's TeamAPIKey: never the hash, never the value. */
function keyJson(row: ApiKeyRow) {
  return {
    id: row.id,
    name: row.name,
    mask: row.mask,
    createdAt: row.createdAt,
    createdBy: null,
    lastUsed: row.lastUsedAt ?? null,
  };
}
