/**
 * One error family for all of Warren. Every error has a `reason`: a stable snake_case string
 * a client can act on (`sandbox_paused`, `capacity_exhausted`). Each reason belongs to one
 * `kind`, and each kind maps to exactly one HTTP status and one Connect code (ERROR_KINDS), so
 * the API, the proxy and the agent translate errors the same way. docs/errors.md lists every
 * reason; it is generated from these tables (a unit test keeps it current).
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
  unsupported_media_type: { status: 415, connect: "invalid_argument" },
  resource_exhausted: { status: 429, connect: "resource_exhausted" },
  internal: { status: 500, connect: "internal" },
  unavailable: { status: 503, connect: "unavailable" },
  insufficient_storage: { status: 507, connect: "resource_exhausted" },
} as const;

export type ErrorKind = keyof typeof ERROR_KINDS;

interface ReasonSpec {
  readonly kind: ErrorKind;
  /** What happened and what the client can do about it (docs/errors.md). */
  readonly doc: string;
}

/**
 * Reasons more precise than their kind. A kind's own name is a reason too, for errors with
 * nothing more to say than their kind (a malformed field: `invalid_argument`, whose message
 * names the field).
 */
export const ERROR_REASONS = {
  sandbox_not_found: {
    kind: "not_found",
    doc: "No sandbox has this id: it never existed, was killed, or timed out.",
  },
  sandbox_paused: {
    kind: "conflict",
    doc: "The sandbox is paused and the call needs it running: resume it (connect) first.",
  },
  sandbox_running: {
    kind: "conflict",
    doc: "The sandbox is already running (resume of a running sandbox).",
  },
  sandbox_busy: {
    kind: "conflict",
    doc: "The sandbox is between states (pausing, killing): retry once the transition ends.",
  },
  sandbox_killed: {
    kind: "conflict",
    doc: "The sandbox was killed while this call was creating or resuming it.",
  },
  template_not_found: {
    kind: "not_found",
    doc: "No template or snapshot has this id or name.",
  },
  template_name_taken: {
    kind: "already_exists",
    doc: "A template or snapshot of your team already has this name, or it is a built-in template's (`base`, `code-interpreter-v1`): choose another or delete yours. Another team's names never conflict.",
  },
  template_in_use: {
    kind: "conflict",
    doc: "Sandboxes still run on this template or snapshot (named in the message): kill them first.",
  },
  template_protected: {
    kind: "invalid_argument",
    doc: "The built-in `base` template cannot be deleted.",
  },
  snapshot_incompatible: {
    kind: "conflict",
    doc: "The snapshot was taken on another accelerator, CPU model, kernel, machine shape or format: it cannot be restored on this node.",
  },
  snapshot_tampered: {
    kind: "internal",
    doc: "A snapshot's files no longer match the checksums recorded when it was captured (changed or missing on disk, or corrupted in the shared snapshot store), a snapshot it stands on is not beside it, its records reach outside the snapshots' directory or name an image outside the guest images directory, or a disk's qcow2 header names another file (an external data file) or a feature Warren's disks never hold, or a disk is still open for writing by another process: it is never restored. The message or the server's log names the file.",
  },
  snapshot_not_found: {
    kind: "not_found",
    doc: "The shared snapshot store has no published snapshot with this id: it was never published, its publish has not finished, or it was deleted.",
  },
  store_unavailable: {
    kind: "unavailable",
    doc: "The shared snapshot store (a shared filesystem or an S3 bucket) could not be reached or answered with an error: retry; the message names the request.",
  },
  capacity_exhausted: {
    kind: "resource_exhausted",
    doc: "The node is at its limit of sandboxes, vCPUs or guest memory: retry after Retry-After, or kill sandboxes.",
  },
  cluster_full: {
    kind: "resource_exhausted",
    doc: "Gateway: no node has room for the sandbox and the admission queue is full or its wait ran out: retry after Retry-After.",
  },
  no_nodes: {
    kind: "unavailable",
    doc: "Gateway: no node server is up (none registered, all down or draining): start or undrain one.",
  },
  node_unreachable: {
    kind: "unavailable",
    doc: "Gateway: the node holding the sandbox did not answer; it is marked down if it stays silent. Retry after Retry-After.",
  },
  sandbox_lost: {
    kind: "not_found",
    doc: "The sandbox's node went down (or its server stopped) while the sandbox ran: it is gone.",
  },
  internal_route: {
    kind: "permission_denied",
    doc: "The route is the internal node API, which only the cluster's gateways call (on a node's cluster port, with a gateway certificate from the cluster CA): API keys and anything else are refused there.",
  },
  start_queue_full: {
    kind: "resource_exhausted",
    doc: "The node is busy starting VMs: as many creates, resumes and forks wait for a start as WARREN_START_QUEUE_DEPTH allows, or the one more would wait longer than WARREN_START_QUEUE_WAIT_MS. Refused at once; retry after Retry-After (when the queue is estimated to have drained by half).",
  },
  start_queue_timeout: {
    kind: "resource_exhausted",
    doc: "A create, resume or fork child waiting for its VM start was given up, leaving nothing behind: the node is slower than estimated when it was queued, so it would not (or did not) start within WARREN_START_QUEUE_WAIT_MS. Retry after Retry-After.",
  },
  memory_pressure: {
    kind: "resource_exhausted",
    doc: "The host's available memory is down to its reserve (WARREN_MEMORY_RESERVE_MIB): no VM is started until some is freed. Retry after Retry-After, or kill sandboxes.",
  },
  disk_pressure: {
    kind: "insufficient_storage",
    doc: "The data directory's filesystem (or, for a volume's content, the volumes' filesystem) would be left with less free space than its reserve (WARREN_DISK_RESERVE_MIB): no sandbox is created, template build started, file upload or volume write taken until disk is freed (delete templates, snapshots, paused sandboxes or volume files). No Retry-After: it frees only when someone frees it.",
  },
  network_exhausted: {
    kind: "resource_exhausted",
    doc: "Every network slot of the node is in use: retry later.",
  },
  not_ready: {
    kind: "unavailable",
    doc: "The server is starting (host setup, base template): retry after Retry-After.",
  },
  start_failed: {
    kind: "unavailable",
    doc: "The server failed to start; the message says why and the server's log has more.",
  },
  shutting_down: {
    kind: "unavailable",
    doc: "The server is shutting down.",
  },
  guest_unavailable: {
    kind: "unavailable",
    doc: "The sandbox's agent (envd) did not answer, or not in time (every call to a guest is bounded in time), e.g. for metrics: retry.",
  },
  guest_reply_invalid: {
    kind: "internal",
    doc: "The sandbox's agent (envd) sent a reply past Warren's limits (head or body too large) or malformed. A guest's root user can replace its agent: the message names the limit.",
  },
  vmm_failed: {
    kind: "internal",
    doc: "The VMM (QEMU) failed to start, snapshot or restore; the server's log has the cause.",
  },
  network_failed: {
    kind: "internal",
    doc: "Setting up or changing a sandbox's network failed; the server's log has the command.",
  },
  image_not_found: {
    kind: "not_found",
    doc: "The registry has no such image, tag or digest: check the reference (and the mirror, if one is set).",
  },
  image_access_denied: {
    kind: "permission_denied",
    doc: "The registry refused to serve the image with the credentials given (or without any): check the username, password or cloud credentials.",
  },
  image_platform_unsupported: {
    kind: "invalid_argument",
    doc: "The image has no linux/amd64 variant, the only platform Warren's guests run.",
  },
  image_pull_failed: {
    kind: "unavailable",
    doc: "Pulling the image failed: the registry was unreachable, answered with an error or sent data that did not match its digest. Retry; the message names the request.",
  },
  image_invalid: {
    kind: "invalid_argument",
    doc: "The image is malformed or too large (manifest, config or a layer): the message names the part.",
  },
  route_not_found: {
    kind: "not_found",
    doc: "No API route has this method and path.",
  },
  build_not_found: {
    kind: "not_found",
    doc: "The template has no build with this id.",
  },
  build_invalid: {
    kind: "invalid_argument",
    doc: "The build's definition has a step, base image or option Warren cannot build; the message names the step.",
  },
  build_in_progress: {
    kind: "conflict",
    doc: "The build was already started, or another build of the template is running: wait for it.",
  },
  upload_link_invalid: {
    kind: "unauthenticated",
    doc: "A file upload link is expired, forged or for another file: ask for a new one.",
  },
  quota_exceeded: {
    kind: "resource_exhausted",
    doc: "A quota would be exceeded; the message names which and how much is in use: a team's running sandboxes, vCPUs, memory or disk (kill or pause sandboxes, or ask the operator for a larger quota), or the node's template build upload bytes (WARREN_BUILD_UPLOADS_MAX_MIB; uploads no build uses are collected after WARREN_BUILD_UPLOAD_RETENTION_MS, deleting a template removes its uploads).",
  },
  admin_required: {
    kind: "permission_denied",
    doc: "The route shows or changes the whole node or cluster, or other teams (`/node`, `/metrics`, drain, teams): send the admin token (`X-Admin-Token`), not a team's API key.",
  },
  team_not_found: {
    kind: "not_found",
    doc: "No team has this id (or it is not the caller's): check the id with `warren team ls`.",
  },
  api_key_not_found: {
    kind: "not_found",
    doc: "The team has no API key with this id: list them with `GET /api-keys` or `warren key ls`.",
  },
  webhook_not_found: {
    kind: "not_found",
    doc: "The team has no webhook with this id: list them with `GET /events/webhooks`.",
  },
  volume_not_found: {
    kind: "not_found",
    doc: "No volume of the caller's team has this id: list them with `GET /volumes` (`Volume.list()`).",
  },
  volume_name_taken: {
    kind: "already_exists",
    doc: "The team already has a volume of this name: pick another, or use that one (`GET /volumes`).",
  },
  secret_host_refused: {
    kind: "permission_denied",
    doc: "A secret bound to its hosts when it was made (`allowedHosts`) is not sent to another: a network rule naming it for a domain its hosts do not cover is refused (400 at the rule), and a request to another host never gets its value.",
  },
  volume_token_invalid: {
    kind: "unauthenticated",
    doc: "The volume content API needs `Authorization: Bearer <token>` with a token `POST /volumes`, `GET /volumes/{id}` or `POST /volumes/{id}/rotate-token` returned for this very volume: one works 7 days, and a rotation ends every token handed out before it. Get a fresh one from `GET /volumes/{id}`.",
  },
} as const satisfies Record<string, ReasonSpec>;

export type ErrorReason = ErrorKind | keyof typeof ERROR_REASONS;

export function kindOf(reason: ErrorReason): ErrorKind {
  return reason in ERROR_KINDS
    ? (reason as ErrorKind)
    : ERROR_REASONS[reason as keyof typeof ERROR_REASONS].kind;
}

export class WarrenError extends Error {
  override readonly name = "WarrenError";
  /** Seconds a client should wait before it retries, when the refusal knows better than its status's default. */
  readonly retryAfterS: number | undefined;

  constructor(
    readonly reason: ErrorReason,
    message: string,
    options?: { cause?: unknown; retryAfterS?: number },
  ) {
    super(message, options);
    this.retryAfterS = options?.retryAfterS;
  }

  get kind(): ErrorKind {
    return kindOf(this.reason);
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
  // A mount point or the root: in use, not the server's failure.
  EBUSY: "conflict",
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
  // fs.cp's own codes (a move across filesystems copies): what was asked cannot be done.
  ERR_FS_CP_DIR_TO_NON_DIR: "invalid_argument",
  ERR_FS_CP_NON_DIR_TO_DIR: "invalid_argument",
  ERR_FS_CP_EINVAL: "invalid_argument",
  ERR_FS_CP_EEXIST: "already_exists",
  ERR_FS_CP_SOCKET: "invalid_argument",
  ERR_FS_CP_FIFO_PIPE: "invalid_argument",
  ERR_FS_CP_SYMLINK_TO_SUBDIRECTORY: "invalid_argument",
  ERR_FS_EISDIR: "invalid_argument",
};

/** Wraps anything thrown into a WarrenError, mapping Node's errno codes; keeps the cause. */
export function toWarrenError(err: unknown, context?: string): WarrenError {
  if (err instanceof WarrenError) return err;
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  const kind = (code && ERRNO_KINDS[code]) || "internal";
  const detail = err instanceof Error ? err.message : String(err);
  return new WarrenError(kind, context ? `${context}: ${detail}` : detail, { cause: err });
}

/** docs/errors.md's two tables (kinds, then reasons), generated from ERROR_KINDS and ERROR_REASONS. */
export function describeErrors(): string {
  const kinds = [
    "| `error_code` (kind) | HTTP | Connect code |",
    "|---|---|---|",
    ...Object.entries(ERROR_KINDS).map(
      ([kind, spec]) => `| \`${kind}\` | ${spec.status} | \`${spec.connect}\` |`,
    ),
  ];
  const reasons = [
    "| `reason` | HTTP | `error_code` | What happened, what to do |",
    "|---|---|---|---|",
    ...Object.entries(ERROR_REASONS).map(
      ([reason, spec]) =>
        `| \`${reason}\` | ${ERROR_KINDS[spec.kind].status} | \`${spec.kind}\` | ${spec.doc} |`,
    ),
  ];
  return `${kinds.join("\n")}\n\n${reasons.join("\n")}`;
}
