/**
 * One error family for all of Warren. A `reason` is a stable machine-readable kind; each
 * maps to exactly one HTTP status and one Connect code name (the table below), so the API,
 * the proxy and the agent translate errors the same way.
 */
export const ERROR_KINDS = {
  invalid_argument: { status: 400, connect: "invalid_argument" },
  unauthenticated: { status: 401, connect: "unauthenticated" },
  permission_denied: { status: 403, connect: "permission_denied" },
  not_found: { status: 404, connect: "not_found" },
  method_not_allowed: { status: 405, connect: "unimplemented" },
  not_acceptable: { status: 406, connect: "invalid_argument" },
  already_exists: { status: 409, connect: "already_exists" },
  conflict: { status: 409, connect: "failed_precondition" },
  payload_too_large: { status: 413, connect: "resource_exhausted" },
  resource_exhausted: { status: 429, connect: "resource_exhausted" },
  internal: { status: 500, connect: "internal" },
  unavailable: { status: 503, connect: "unavailable" },
  insufficient_storage: { status: 507, connect: "resource_exhausted" },
} as const;

export type ErrorKind = keyof typeof ERROR_KINDS;

export class WarrenError extends Error {
  override readonly name = "WarrenError";
  constructor(
    readonly kind: ErrorKind,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }

  get status(): number {
    return ERROR_KINDS[this.kind].status;
  }
}

const ERRNO_KINDS: Record<string, ErrorKind> = {
  ENOENT: "not_found",
  EACCES: "permission_denied",
  EPERM: "permission_denied",
  EEXIST: "already_exists",
  ENOTEMPTY: "already_exists",
  ENOTDIR: "invalid_argument",
  EISDIR: "invalid_argument",
  EINVAL: "invalid_argument",
  ELOOP: "invalid_argument",
  ENAMETOOLONG: "invalid_argument",
  EXDEV: "invalid_argument",
  ENOSPC: "insufficient_storage",
  EDQUOT: "insufficient_storage",
  EMFILE: "resource_exhausted",
  ENFILE: "resource_exhausted",
};

/** Wraps anything thrown into a WarrenError, mapping Node's errno codes; keeps the cause. */
export function toWarrenError(err: unknown, context?: string): WarrenError {
  if (err instanceof WarrenError) return err;
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  const kind = (code && ERRNO_KINDS[code]) || "internal";
  const detail = err instanceof Error ? err.message : String(err);
  return new WarrenError(kind, context ? `${context}: ${detail}` : detail, { cause: err });
}
