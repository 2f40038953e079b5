/**
 * Every error response is E2B's `Error` JSON: `{code, message}` with `code` equal to the
 * HTTP status (the SDK tests `error.code === 404`, not the status line), plus `error_code`
 * (the error's kind, e.g. `conflict`) and `reason` (what exactly, e.g. `sandbox_paused`;
 * docs/errors.md lists them). WarrenErrors and anything else become bodies as the relay's
 * `apiErrorBody` builds them for every server (a 500 says only "internal error", its cause
 * logged, never sent); fastify's own 4xx (body too large, bad media type, schema errors)
 * keep their status with a clearer message.
 */
import type {
  FastifyError,
  FastifyReply,
  FastifyRequest,
  FastifySchemaValidationError,
} from "fastify";
import { type ApiErrorBody, apiErrorBody, retryAfterSeconds } from "../relay/index.js";
import { type ErrorKind, WarrenError } from "../shared/index.js";

export type ErrorJson = ApiErrorBody;

/** Fastify's own request errors that are the client's doing, with a clearer message. */
const FASTIFY_MESSAGES: Readonly<Record<string, (request: FastifyRequest) => string>> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: (request) =>
    `unsupported media type ${JSON.stringify(request.headers["content-type"] ?? "")}: send application/json`,
  FST_ERR_CTP_BODY_TOO_LARGE: () => "request body is too large",
  FST_ERR_CTP_INVALID_JSON_BODY: () => "request body is not valid JSON",
};

const CLIENT_ERROR_KINDS: Readonly<Record<number, ErrorKind>> = {
  400: "invalid_argument",
  404: "not_found",
  413: "payload_too_large",
  415: "unsupported_media_type",
};

/**
 * fastify `schemaErrorFormatter`: "<where> <what>", e.g. "body/timeout must be integer".
 * Union types read "must be object or null" rather than ajv's "must be object,null".
 */
export function formatSchemaErrors(errors: FastifySchemaValidationError[], dataVar: string): Error {
  const describe = (e: FastifySchemaValidationError) => {
    const types = e.params.type;
    return e.keyword === "type" && Array.isArray(types)
      ? `must be ${types.join(" or ")}`
      : e.message;
  };
  return new Error(errors.map((e) => `${dataVar}${e.instancePath} ${describe(e)}`).join(", "));
}

export function toErrorJson(error: unknown, request: FastifyRequest): ErrorJson {
  if (error instanceof WarrenError) return apiErrorBody(error);
  const fastifyError = error as Partial<FastifyError> | undefined;
  const status = fastifyError?.statusCode;
  const code = fastifyError?.code ?? "";
  const isClientError = status !== undefined && status >= 400 && status < 500;
  if (isClientError && (fastifyError?.validation !== undefined || code.startsWith("FST_"))) {
    const message = FASTIFY_MESSAGES[code]?.(request) ?? fastifyError?.message ?? "bad request";
    const kind = CLIENT_ERROR_KINDS[status];
    return {
      code: status,
      message,
      ...(kind === undefined ? {} : { error_code: kind, reason: kind }),
    };
  }
  return apiErrorBody(error);
}

/** The reason each error answer gave, by its raw response (the response hook reads it). */
const answeredReasons = new WeakMap<object, string>();

/** The `reason` an answer sent as an error gave, if it was one. */
export function reasonOf(reply: FastifyReply): string | undefined {
  return answeredReasons.get(reply.raw);
}

/** `error`: what was thrown, when there was something (its own Retry-After estimate). */
export function sendError(reply: FastifyReply, body: ErrorJson, error?: unknown): FastifyReply {
  if (body.reason) answeredReasons.set(reply.raw, body.reason);
  const retryAfter = retryAfterSeconds(body.code, error);
  if (retryAfter !== undefined) reply.header("retry-after", retryAfter);
  return reply.code(body.code).type("application/json; charset=utf-8").send(body);
}

/** Bytes of an oversized body read and dropped so that its sender still gets the 413. */
const DRAIN_LIMIT_BYTES = 64 * 1024 * 1024;

/**
 * Resolves once the rest of the request body has been read and dropped, or at once past
 * DRAIN_LIMIT_BYTES. Most clients (node:http, undici) write the whole body before reading:
 * answering 413 and closing mid-body makes them fail with EPIPE and never see the answer.
 */
function drainBody(raw: FastifyRequest["raw"]): Promise<void> {
  // Ended without `complete`: a body cut short (or an injected request's), nothing more comes.
  if (raw.complete || raw.readableEnded || raw.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    let seen = 0;
    const done = () => {
      raw.off("data", onData);
      resolve();
    };
    const onData = (chunk: Buffer) => {
      seen += chunk.length;
      if (seen > DRAIN_LIMIT_BYTES) done();
    };
    raw.on("data", onData);
    raw.once("end", done);
    raw.once("error", done);
    raw.once("close", done);
    raw.resume();
  });
}

/** fastify `setErrorHandler`: the single place errors become responses. */
export async function handleError(error: unknown, request: FastifyRequest, reply: FastifyReply) {
  const body = toErrorJson(error, request);
  // 503s (starting, draining) are expected and say so themselves; other 5xx are not.
  if (body.code >= 500 && body.code !== 503) {
    request.log.error({ err: error }, `${request.method} ${request.url} failed: ${body.message}`);
  }
  // Refused before its body was all read (too large, over a quota half-way): the connection
  // cannot carry another request, and a client must not pool it.
  if (body.code === 413 || !request.raw.complete) {
    reply.header("connection", "close");
    await drainBody(request.raw);
  }
  return sendError(reply, body, error);
}

/** fastify `setNotFoundHandler`: unknown routes (and unknown methods) get a JSON 404 too. */
export function handleNotFound(request: FastifyRequest, reply: FastifyReply) {
  return sendError(reply, {
    code: 404,
    message: `route ${request.method} ${request.url.split("?")[0]} not found`,
    error_code: "not_found",
    reason: "route_not_found",
  });
}

/** fastify `frameworkErrors`: requests that never reach routing (e.g. a malformed URL). */
export function handleFrameworkError(error: Error, _request: FastifyRequest, reply: FastifyReply) {
  sendError(reply, {
    code: 400,
    message: error.message,
    error_code: "invalid_argument",
    reason: "invalid_argument",
  });
}
