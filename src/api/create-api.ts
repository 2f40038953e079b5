/**
 * `createApi()`: the E2B control-plane REST API as a fastify instance (not listening).
 * The server composes it with the orchestrator's `SandboxService`; tests `inject()` into it.
 */
import type { IncomingHttpHeaders } from "node:http";
import fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyServerFactory,
  LogController,
} from "fastify";
import type { Logger } from "pino";
import type { TemplateBuilds } from "../builds/index.js";
import type { Webhooks } from "../events/index.js";
import { assertReady, type SandboxService, type ServerStatus } from "../orchestrator/index.js";
import type { Secrets } from "../secrets/index.js";
import type { Caller, TeamAdmin } from "../tenancy/index.js";
import type { Volumes } from "../volumes/index.js";
import type { ApiContext } from "./api-context.js";
import { ownedSandbox } from "./caller.js";
import { registerCors } from "./cors.js";
import {
  formatSchemaErrors,
  handleError,
  handleFrameworkError,
  handleNotFound,
  reasonOf,
} from "./errors.js";
import { checkSandboxId } from "./input.js";
import { requestSplit, timeHandlers } from "./request-phases.js";
import { registerEventRoutes } from "./routes/events.js";
import { registerHealthRoutes } from "./routes/health.js";
import { type InternalApiOptions, registerInternalRoutes } from "./routes/internal.js";
import { registerNodeRoutes } from "./routes/node.js";
import { registerLifecycleRoutes } from "./routes/sandbox-lifecycle.js";
import { registerNetworkRoutes } from "./routes/sandbox-network.js";
import { registerTelemetryRoutes } from "./routes/sandbox-telemetry.js";
import { registerSandboxRoutes } from "./routes/sandboxes.js";
import { registerSecretRoutes } from "./routes/secrets.js";
import { registerSnapshotRoutes } from "./routes/snapshots.js";
import { registerTeamRoutes } from "./routes/teams.js";
import { registerTemplateRoutes, registerUploadRoute } from "./routes/templates.js";
import { registerVolumeContentRoutes, registerVolumeRoutes } from "./routes/volumes.js";
import { registerWebhookRoutes } from "./routes/webhooks.js";

export interface ApiOptions {
  /** The node's sandboxes; throws the readiness gate's error (503) while the node starts. */
  readonly service: () => SandboxService;
  /** The node's phase, answered while it starts. Default: the service's. */
  readonly status?: () => ServerStatus;
  /**
   * The template build API; it throws the readiness gate's error (503) while the node starts.
   * Absent: its routes answer 503.
   */
  readonly builds?: () => TemplateBuilds;
  /** Who a request is from: its team (API key) or the admin (401 when neither). */
  readonly authenticate: (headers: IncomingHttpHeaders) => Promise<Caller>;
  /** Teams and keys (the admin's and `/api-keys` routes); throws 503 while the node starts. */
  readonly teamAdmin?: () => TeamAdmin;
  /** Volumes and their content API; throws 503 while the node starts. Absent: 503. */
  readonly volumes?: () => Volumes;
  readonly secrets?: () => Secrets;
  /** A team's webhooks (`/events/webhooks`); absent: 503. */
  readonly webhooks?: () => Webhooks;
  /** `domain` of Sandbox responses. Default null: the SDK uses its own E2B_DOMAIN. */
  readonly domain?: string | null;
  /** TTL of a sandbox created without `timeout`. Default 300 000 (E2B's 300 s). */
  readonly defaultTimeoutMs?: number;
  /** Largest TTL a request may ask for; more is a 400. Default 86 400 000 (24 h). */
  readonly maxTimeoutMs?: number;
  /** Largest request body; more is a 413. Default 1 MiB. */
  readonly bodyLimitBytes?: number;
  /** fastify's `loggerInstance`. Default: no logging. */
  readonly logger?: Logger;
  /** fastify's `serverFactory` (e.g. to share a server with the proxy). */
  readonly serverFactory?: FastifyServerFactory;
  /** Told of every answer: its status and, for an error, its reason (the node's metrics). */
  readonly onAnswered?: (status: number, reason: string | undefined) => void;
  /** The internal node API, on a node in a cluster; absent: its routes do not exist. */
  readonly internal?: InternalApiOptions;
}

export const DEFAULT_TIMEOUT_MS = 300_000;
export const MAX_TIMEOUT_MS = 86_400_000;
export const DEFAULT_BODY_LIMIT_BYTES = 1024 * 1024;

export function createApi(options: ApiOptions): FastifyInstance {
  const context: ApiContext = {
    service: options.service,
    status: options.status ?? (() => options.service().status()),
    builds: options.builds,
    teamAdmin: options.teamAdmin,
    volumes: options.volumes,
    secrets: options.secrets,
    webhooks: options.webhooks,
    domain: options.domain ?? null,
    defaultTimeoutMs: options.defaultTimeoutMs ?? DEFAULT_TIMEOUT_MS,
    maxTimeoutMs: options.maxTimeoutMs ?? MAX_TIMEOUT_MS,
  };
  const app = fastify({
    bodyLimit: options.bodyLimitBytes ?? DEFAULT_BODY_LIMIT_BYTES,
    ...(options.logger === undefined
      ? { logger: false }
      : { loggerInstance: options.logger as FastifyBaseLogger }),
    ...(options.serverFactory === undefined ? {} : { serverFactory: options.serverFactory }),
    // Bodies are validated as sent (no "30" → 30); query strings are all declared as
    // strings and parsed explicitly (input.ts), so coercion would never help.
    ajv: { customOptions: { coerceTypes: false, allowUnionTypes: true } },
    // One line per request from the hook below, not fastify's two at info.
    logController: new LogController({ disableRequestLogging: true }),
    schemaErrorFormatter: formatSchemaErrors,
    frameworkErrors: handleFrameworkError,
  });

  registerCors(app);
  acceptJsonOnly(app);
  app.addHook("onResponse", async (request, reply) => {
    const fields = {
      method: request.method,
      route: request.routeOptions.url ?? "(none)",
      status: reply.statusCode,
      durationMs: Math.round(reply.elapsedTime),
      ...sandboxOf(request.params),
    };
    const split = requestSplit(request, reply.elapsedTime);
    if (reply.statusCode >= 500) request.log.warn({ ...fields, ...split }, "api.request");
    // Operations on VMs are few and slow: each one's split is worth a line at info.
    else if (split) request.log.info({ ...fields, ...split }, "api.request");
    else request.log.debug(fields, "api.request");
    options.onAnswered?.(reply.statusCode, reasonOf(reply));
  });
  app.setErrorHandler(handleError);
  app.setNotFoundHandler(handleNotFound);
  registerHealthRoutes(app, context, options.authenticate);
  registerUploadRoute(app, context);
  registerVolumeContentRoutes(app, context);
  if (options.internal) registerInternalRoutes(app, context, options.internal);

  // Every other route: the caller (API key or admin token), then readiness, then a
  // well-formed sandbox id that the caller's team owns.
  app.register(async (api) => {
    timeHandlers(api);
    api.addHook("onRequest", async (request) => {
      request.caller = await options.authenticate(request.headers);
    });
    // 503 (with Retry-After) until the node is ready: the SDK reports ServiceBusyError.
    api.addHook("onRequest", async () => assertReady(context.status()));
    api.addHook("preValidation", async (request) => {
      const { sandboxID } = request.params as { sandboxID?: string };
      if (sandboxID === undefined) return;
      checkSandboxId(sandboxID);
      ownedSandbox(context.service(), request.caller as Caller, sandboxID);
    });
    registerSandboxRoutes(api, context);
    registerLifecycleRoutes(api, context);
    registerTelemetryRoutes(api, context);
    registerSnapshotRoutes(api, context);
    registerEventRoutes(api, context);
    registerWebhookRoutes(api, context);
    registerNetworkRoutes(api, context);
    registerTemplateRoutes(api, context);
    registerNodeRoutes(api, context);
    registerTeamRoutes(api, context);
    registerVolumeRoutes(api, context);
    registerSecretRoutes(api, context);
  });
  return app;
}

/**
 * JSON bodies only: any other content type is a 415. An empty JSON body counts as no body
 * (some clients send `Content-Type: application/json` on a body-less POST); routes whose
 * body is required then fail validation with a 400.
 */
function acceptJsonOnly(app: FastifyInstance): void {
  const parseJson = app.getDefaultJsonParser("error", "error");
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("application/json", { parseAs: "string" }, (request, body, done) => {
    const text = typeof body === "string" ? body : body.toString("utf8");
    if (text.trim() === "") {
      done(null, undefined);
      return;
    }
    parseJson(request, text, done);
  });
}

/** The sandbox a request names (`:sandboxID`), for its line. */
function sandboxOf(params: unknown): { sandboxId?: string } {
  const id = (params as { sandboxID?: unknown } | undefined)?.sandboxID;
  return typeof id === "string" ? { sandboxId: id } : {};
}
