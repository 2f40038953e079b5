import { WarrenError } from "../shared/index.js";

/**
 * E2B's API error (`Error` in its OpenAPI): `code` repeats the HTTP status (the SDK reads
 * it, not the status line), `error_code` is the kind and `reason` what exactly
 * (docs/errors.md).
 */
export interface ApiErrorBody {
  readonly code: number;
  readonly message: string;
  readonly error_code?: string;
  readonly reason?: string;
}

/** E2B's proxy error body (`packages/shared/pkg/proxy/template`). */
export interface ProxyErrorBody {
  /** Absent when the request named no valid sandbox. */
  readonly sandboxId?: string;
  readonly message: string;
  /** The HTTP status, repeated. */
  readonly code: number;
}

/** An error response: what `sendError` and `writeSocketError` write. */
export interface ErrorAnswer {
  readonly status: number;
  /** Besides `content-length`, which the writers add. */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: ApiErrorBody | ProxyErrorBody;
}

/** Seconds a client should wait before retrying, by status: busy (429), not ready (503). */
const RETRY_AFTER_SECONDS: Readonly<Record<number, string>> = { 429: "1", 503: "5" };

/** Retry-After for an answer: the refusal's own estimate (a WarrenError's), else its status's. */
export function retryAfterSeconds(status: number, error?: unknown): string | undefined {
  if (error instanceof WarrenError && error.retryAfterS !== undefined && status === error.status) {
    return String(error.retryAfterS);
  }
  return RETRY_AFTER_SECONDS[status];
}

/**
 * The API's error body for anything thrown: a WarrenError keeps its status, kind, reason
 * and message; an internal one, or anything else, is a 500 that says only "internal error"
 * (its cause is the server's to log, not the client's to read).
 */
export function apiErrorBody(error: unknown): ApiErrorBody {
  if (!(error instanceof WarrenError)) {
    return { code: 500, message: "internal error", error_code: "internal" };
  }
  const body = apiErrorEntry(error);
  return error.kind === "internal" ? { ...body, message: "internal error" } : body;
}

/**
 * One failed part of an answer that stands (a fork's child that did not start), as E2B's
 * `Error`: its message kept whatever its kind, since nothing else tells its caller why.
 */
export function apiErrorEntry(error: WarrenError): ApiErrorBody {
  return {
    code: error.status,
    message: error.message,
    error_code: error.kind,
    reason: error.reason,
  };
}

/** The API's error answer: JSON as fastify sends it, `Retry-After` on 429 and 503. */
export function apiError(
  error: unknown,
  extraHeaders: Readonly<Record<string, string>> = {},
): ErrorAnswer {
  const body = apiErrorBody(error);
  const retryAfter = retryAfterSeconds(body.code, error);
  return {
    status: body.code,
    headers: {
      "content-type": "application/json; charset=utf-8",
      ...(retryAfter !== undefined && { "retry-after": retryAfter }),
      ...extraHeaders,
    },
    body,
  };
}

/**
 * A proxy refusal. Readable from any origin: the SDK in a web page then sees why ("port not
 * open", "not found") rather than an opaque CORS failure; the body holds nothing but that.
 */
export function proxyRefusal(body: ProxyErrorBody): ErrorAnswer {
  return {
    status: body.code,
    headers: { "content-type": "application/json", "access-control-allow-origin": "*" },
    body,
  };
}
