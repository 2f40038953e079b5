/**
 * The internal node API: what only the cluster asks of a node server (the halves of a fork
 * larger than one node, taking in a paused sandbox moved to it, draining). A gateway calls it
 * on its **control connections** to the node's cluster port: TLS with the gateway's
 * certificate from the cluster CA, negotiating the ALPN protocol tls' `CONTROL_ALPN`. The
 * connections a gateway relays client traffic on never negotiate it, so no byte a client
 * sends can reach these routes; a control connection answers these routes and nothing else.
 * Paths, bodies and answers are typed here, so that the node's routes and the gateway's
 * calls cannot drift apart.
 */

/** Every internal route is under this prefix, apart from E2B's API. */
export const INTERNAL_API_PREFIX = "/internal";

/** Whether a request path is the internal API's (the prefix itself, or below it). */
export function isInternalPath(url: string | undefined): boolean {
  const path = (url ?? "").split("?", 1)[0] ?? "";
  return path === INTERNAL_API_PREFIX || path.startsWith(`${INTERNAL_API_PREFIX}/`);
}

const sandbox = (sandboxId: string) =>
  `${INTERNAL_API_PREFIX}/sandboxes/${encodeURIComponent(sandboxId)}`;

export const INTERNAL_PATHS = {
  /** POST `SpillingForkRequest` → 201 `InternalForkChild[]`: capture, start `local` here, spill the rest. */
  spillingFork: (sandboxId: string) => `${sandbox(sandboxId)}/fork`,
  /** POST `CaptureForkRequest` → 201 `InternalForkChild[]`: children from a capture another node spilled. */
  forkFromCapture: (sandboxId: string, snapshotId: string) =>
    `${sandbox(sandboxId)}/fork/${encodeURIComponent(snapshotId)}`,
  /** POST, no body → 204: fetch the snapshot of a paused sandbox claimed for this node and take it in. */
  adopt: (sandboxId: string) => `${sandbox(sandboxId)}/adopt`,
  /** POST, no body → 202: stop taking sandboxes, pause the running ones, publish the paused ones. */
  drain: `${INTERNAL_API_PREFIX}/node/drain`,
  /** POST, no body → 204: take sandboxes again. */
  undrain: `${INTERNAL_API_PREFIX}/node/undrain`,
} as const;

/** Children from a capture another node spilled: E2B's fork body, `count` required. */
export interface CaptureForkRequest {
  readonly count: number;
  /** Seconds, as E2B's fork body. */
  readonly timeout?: number;
  readonly metadata?: Readonly<Record<string, string>>;
}

/** A fork larger than the node: `local` children here, the other `count - local` spilled. */
export interface SpillingForkRequest extends CaptureForkRequest {
  readonly local: number;
}

/** A child that did not start, as E2B's fork results report one (`Error`). */
export interface InternalForkError {
  readonly code: number;
  readonly message: string;
  readonly error_code?: string;
  readonly reason?: string;
}

/**
 * One child in an internal fork's answer: E2B's `SandboxForkResult` (a started sandbox, as
 * the API's create answers it, or an error), or, from a spilling fork, the capture another
 * node starts it from.
 */
export type InternalForkChild =
  | { readonly sandbox: { readonly sandboxID: string } }
  | { readonly error: InternalForkError }
  | { readonly spilled: { readonly snapshotID: string } };
