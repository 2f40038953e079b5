/**
 * Volumes (E2B's `/volumes`, with the API key) and their content (`/volumecontent/{id}/…`,
 * with the volume's own token: what `Volume`'s instance methods call).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { WarrenError } from "../../shared/index.js";
import { actingTeam } from "../../tenancy/index.js";
import type { VolumeEntry, Volumes, VolumeWithToken } from "../../volumes/index.js";
import type { ApiContext } from "../api-context.js";
import { callerOf } from "../caller.js";
import { invalid, queryInteger } from "../input.js";

interface VolumeParams {
  volumeID: string;
}

type ContentQuery = Partial<Record<"path" | "depth" | "uid" | "gid" | "mode" | "force", string>>;

const newVolumeSchema = {
  type: "object",
  required: ["name"],
  properties: { name: { type: "string" } },
} as const;

const metadataSchema = {
  type: ["object", "null"],
  properties: {
    uid: { type: "integer" },
    gid: { type: "integer" },
    mode: { type: "integer" },
  },
} as const;

const MAX_ID = 0xfffffffe;

/** `/volumes`: inside the API key's scope. */
export function registerVolumeRoutes(app: FastifyInstance, context: ApiContext): void {
  const team = (request: FastifyRequest) => callerOf(request).teamId;

  app.get("/volumes", async (request) => {
    const rows = await volumesOf(context).list(team(request));
    return rows.map((row) => ({ volumeID: row.id, name: row.name }));
  });

  app.post<{ Body: { name: string } }>(
    "/volumes",
    { schema: { body: newVolumeSchema } },
    async (request, reply) => {
      // The admin creates in the team it acts as (the default team unless X-Team-ID says).
      const volumes = volumesOf(context);
      const row = await volumes.create(actingTeam(callerOf(request)), request.body.name);
      return reply.code(201).send(volumeAndToken(volumes.withToken(row), context));
    },
  );

  app.get<{ Params: VolumeParams }>("/volumes/:volumeID", async (request) => {
    const volumes = volumesOf(context);
    const row = await volumes.get(team(request), request.params.volumeID);
    return volumeAndToken(volumes.withToken(row), context);
  });

  // Warren's own (E2B has none): a leaked token stops working now, not at its expiry.
  app.post<{ Params: VolumeParams }>("/volumes/:volumeID/rotate-token", async (request) => {
    const rotated = await volumesOf(context).rotateToken(team(request), request.params.volumeID);
    return volumeAndToken(rotated, context);
  });

  app.delete<{ Params: VolumeParams }>("/volumes/:volumeID", async (request, reply) => {
    await volumesOf(context).destroy(team(request), request.params.volumeID);
    return reply.code(204).send();
  });
}

/** `/volumecontent/{id}/…`: outside the API key's scope; the volume's token is the key. */
export function registerVolumeContentRoutes(app: FastifyInstance, context: ApiContext): void {
  app.register(async (content) => {
    content.removeAllContentTypeParsers();
    // A file's bytes are streamed by the handler; metadata is JSON.
    content.addContentTypeParser("application/json", { parseAs: "string" }, (_r, body, done) => {
      const text = typeof body === "string" ? body : body.toString("utf8");
      try {
        done(null, text.trim() === "" ? undefined : JSON.parse(text));
      } catch {
        done(new WarrenError("invalid_argument", "body is not valid JSON"), undefined);
      }
    });
    content.addContentTypeParser("*", (_request, _payload, done) => done(null));

    const files = (request: FastifyRequest<{ Params: VolumeParams }>) =>
      volumesOf(context).files(request.params.volumeID, bearer(request));
    type Req = FastifyRequest<{ Params: VolumeParams; Querystring: ContentQuery }>;

    content.get("/volumecontent/:volumeID/dir", async (request: Req) => {
      const depth = queryInteger("depth", request.query.depth, { min: 1, max: 64 }) ?? 1;
      const entries = await (await files(request)).list(pathOf(request.query), depth);
      return entries.map(toEntryJson);
    });

    content.post("/volumecontent/:volumeID/dir", async (request: Req, reply: FastifyReply) => {
      const made = await (await files(request)).makeDir(pathOf(request.query), {
        ...metadataOf(request.query),
        force: flag("force", request.query.force),
      });
      return reply.code(201).send(toEntryJson(made));
    });

    content.get("/volumecontent/:volumeID/path", async (request: Req) =>
      toEntryJson(await (await files(request)).stat(pathOf(request.query))),
    );

    content.patch<{
      Params: VolumeParams;
      Querystring: ContentQuery;
      Body: { uid?: number; gid?: number; mode?: number } | null;
    }>("/volumecontent/:volumeID/path", { schema: { body: metadataSchema } }, async (request) => {
      const { uid, gid, mode } = request.body ?? {};
      const entry = await (await files(request)).setMetadata(pathOf(request.query), {
        ...(uid !== undefined && { uid }),
        ...(gid !== undefined && { gid }),
        ...(mode !== undefined && { mode }),
      });
      return toEntryJson(entry);
    });

    content.delete("/volumecontent/:volumeID/path", async (request: Req, reply: FastifyReply) => {
      await (await files(request)).remove(pathOf(request.query));
      return reply.code(204).send();
    });

    content.get("/volumecontent/:volumeID/file", async (request: Req, reply: FastifyReply) => {
      const { size, body } = await (await files(request)).read(pathOf(request.query));
      return reply
        .header("content-type", "application/octet-stream")
        .header("content-length", size)
        .send(body);
    });

    // 201 as E2B's spec says: the Python SDK's client parses only that (the JS one any 2xx).
    content.put("/volumecontent/:volumeID/file", async (request: Req, reply: FastifyReply) => {
      const written = await (await files(request)).write(pathOf(request.query), request.raw, {
        ...metadataOf(request.query),
        force: flag("force", request.query.force),
      });
      return reply.code(201).send(toEntryJson(written));
    });
  });
}

function volumesOf(context: ApiContext): Volumes {
  if (!context.volumes) throw new WarrenError("unavailable", "volumes are not served here");
  return context.volumes();
}

/** E2B's `VolumeAndToken`. */
function volumeAndToken({ row, token }: VolumeWithToken, context: ApiContext) {
  return {
    volumeID: row.id,
    name: row.name,
    token,
    ...(context.domain !== null && { domain: context.domain }),
  };
}

function bearer(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  const match = typeof header === "string" ? /^Bearer\s+(\S+)$/i.exec(header) : null;
  return match?.[1];
}

function pathOf(query: ContentQuery): string {
  if (query.path === undefined) throw invalid("querystring/path", "is required");
  return query.path;
}

function metadataOf(query: ContentQuery) {
  const uid = queryInteger("uid", query.uid, { min: 0, max: MAX_ID });
  const gid = queryInteger("gid", query.gid, { min: 0, max: MAX_ID });
  const mode = queryInteger("mode", query.mode, { min: 0, max: 0o7777 });
  return {
    ...(uid !== undefined && { uid }),
    ...(gid !== undefined && { gid }),
    ...(mode !== undefined && { mode }),
  };
}

function flag(name: string, value: string | undefined): boolean {
  if (value === undefined || value === "false") return false;
  if (value === "true") return true;
  throw invalid(`querystring/${name}`, "must be true or false");
}

function toEntryJson(entry: VolumeEntry) {
  return {
    ...entry,
    atime: entry.atime.toISOString(),
    mtime: entry.mtime.toISOString(),
    ctime: entry.ctime.toISOString(),
  };
}
