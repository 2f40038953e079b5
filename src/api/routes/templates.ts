/**
 * The template build API as `e2b`'s `Template` drives it: `POST /v3/templates` (request a
 * build), `GET /templates/:id/files/:hash` (an upload link), `PUT` on that link (no API key:
 * the link is signed), `POST /v2/templates/:id/builds/:build` (start), the build's status
 * and logs, templates listed, found, deleted and tagged, and `GET /templates/aliases/:name`.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { TemplateBuilds } from "../../builds/index.js";
import { WarrenError } from "../../shared/index.js";
import { actingTeam } from "../../tenancy/index.js";
import type { ApiContext } from "../api-context.js";
import { callerOf } from "../caller.js";
import { queryInteger } from "../input.js";
import {
  type BuildLogsQuery,
  type BuildParams,
  type BuildRequestBody,
  type BuildStatusQuery,
  buildLogsQuerySchema,
  buildRequestSchema,
  buildStatusQuerySchema,
  type FileParams,
  type TagsBody,
  type TemplateParams,
  tagsAssignSchema,
  tagsRemoveSchema,
  type UploadQuery,
} from "../schemas.js";

const MAX_LOGS_OFFSET = 10_000_000;

/** The template build API, or why there is none (yet): not started, or not served here. */
function buildsOf(context: ApiContext): TemplateBuilds {
  if (!context.builds) throw new WarrenError("unavailable", "this server builds no templates");
  return context.builds();
}

export function registerTemplateRoutes(app: FastifyInstance, context: ApiContext): void {
  const builds = () => buildsOf(context);

  app.post<{ Body: BuildRequestBody }>(
    "/v3/templates",
    { schema: { body: buildRequestSchema } },
    async (request, reply) => {
      const body = request.body;
      const name = body.name ?? body.alias;
      if (name === undefined) throw new WarrenError("invalid_argument", "body/name is required");
      const requested = await builds().requestBuild(actingTeam(callerOf(request)), {
        name,
        tags: body.tags,
        cpuCount: body.cpuCount,
        memoryMB: body.memoryMB,
        minFreeDiskMb: body.minFreeDiskMb,
      });
      return reply.code(202).send(requested);
    },
  );

  app.get<{ Params: FileParams }>("/templates/:templateID/files/:hash", async (request, reply) => {
    const { templateID, hash } = request.params;
    const link = await builds().fileUploadLink(team(request), templateID, hash, baseUrl(request));
    return reply.code(201).send(link);
  });

  app.post<{ Params: BuildParams; Body: unknown }>(
    "/v2/templates/:templateID/builds/:buildID",
    async (request, reply) => {
      const { templateID, buildID } = request.params;
      await builds().startBuild(team(request), templateID, buildID, request.body ?? {});
      return reply.code(202).send();
    },
  );

  app.get<{ Params: BuildParams; Querystring: BuildStatusQuery }>(
    "/templates/:templateID/builds/:buildID/status",
    { schema: { querystring: buildStatusQuerySchema } },
    async (request) => {
      const { templateID, buildID } = request.params;
      const offset = queryInteger("logsOffset", request.query.logsOffset, {
        min: 0,
        max: MAX_LOGS_OFFSET,
      });
      return builds().status(team(request), templateID, buildID, offset);
    },
  );

  app.get<{ Params: BuildParams; Querystring: BuildLogsQuery }>(
    "/templates/:templateID/builds/:buildID/logs",
    { schema: { querystring: buildLogsQuerySchema } },
    async (request) => {
      const { templateID, buildID } = request.params;
      const { query } = request;
      return builds().logs(team(request), templateID, buildID, {
        cursor: queryInteger("cursor", query.cursor, { min: 0, max: Number.MAX_SAFE_INTEGER }),
        limit: queryInteger("limit", query.limit, { min: 1, max: 100 }),
        direction: query.direction,
        level: query.level,
      });
    },
  );

  app.get("/templates", async (request) => builds().list(team(request)));

  app.get<{ Params: { alias: string } }>("/templates/aliases/:alias", async (request) =>
    builds().tags.alias(team(request), request.params.alias),
  );

  app.get<{ Params: TemplateParams }>("/templates/:templateID", async (request) =>
    builds().get(team(request), request.params.templateID),
  );

  app.get<{ Params: TemplateParams }>("/templates/:templateID/tags", async (request) =>
    builds().tags.listTags(team(request), request.params.templateID),
  );

  app.post<{ Body: TagsBody & { target: string } }>(
    "/templates/tags",
    { schema: { body: tagsAssignSchema } },
    async (request, reply) => {
      const assigned = await builds().tags.assignTags(
        team(request),
        request.body.target,
        request.body.tags,
      );
      return reply.code(201).send(assigned);
    },
  );

  app.delete<{ Body: TagsBody & { name: string } }>(
    "/templates/tags",
    { schema: { body: tagsRemoveSchema } },
    async (request, reply) => {
      await builds().tags.removeTags(team(request), request.body.name, request.body.tags);
      return reply.code(204).send();
    },
  );

  app.delete<{ Params: TemplateParams }>("/templates/:templateID", async (request, reply) => {
    // fastify has already decoded the segment: "my-snap%3Adefault" arrives as "my-snap:default".
    const service = context.builds?.();
    if (service) await service.delete(team(request), request.params.templateID);
    else await context.service().deleteTemplate(request.params.templateID, team(request));
    return reply.code(204).send();
  });
}

/**
 * `PUT` of an upload link: no API key (the SDK sends none), authorized by the link's
 * signature; the body (any content type) streams to disk, bounded by the builds' limit,
 * quota and disk reserve, and checked against a `Content-Digest` (sha-256) when one is sent.
 */
export function registerUploadRoute(app: FastifyInstance, context: ApiContext): void {
  app.register(async (uploads) => {
    uploads.removeAllContentTypeParsers();
    // Left unread here: the handler streams it.
    uploads.addContentTypeParser("*", (_request, _payload, done) => done(null));
    uploads.put<{ Params: FileParams; Querystring: UploadQuery }>(
      "/templates/:templateID/files/:hash",
      async (request, reply) => {
        const service = buildsOf(context);
        const { templateID, hash } = request.params;
        const length = request.headers["content-length"];
        const digest = request.headers["content-digest"];
        await service.acceptUpload(templateID, hash, request.query, request.raw, {
          ...(length !== undefined && { declaredBytes: Number(length) }),
          ...(typeof digest === "string" && { contentDigest: digest }),
        });
        return reply.code(201).send();
      },
    );
  });
}

/** The team whose templates the request sees (undefined: the admin's view of every team). */
function team(request: FastifyRequest): string | undefined {
  return callerOf(request).teamId;
}

/** The API's address as the client reached it: upload links must point back there. */
function baseUrl(request: FastifyRequest): string {
  return `${request.protocol}://${request.headers.host ?? request.hostname}`;
}
