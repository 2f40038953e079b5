/**
 * The internal node API: what only the cluster asks of a node server (the halves of a fork
 * larger than one node, taking in a paused sandbox moved to it, draining). Gateways call it
 * on the node's cluster port, which only takes connections with a gateway's certificate from
 * the cluster CA; tenants' API keys are refused there. Paths are built here so that the
 * node's routes and the gateway's calls cannot drift apart.
 */

/** Every internal route is under this prefix, apart from E2B's API. */
export const INTERNAL_API_PREFIX = "/internal";

const sandbox = (sandboxId: string) =>
  `${INTERNAL_API_PREFIX}/sandboxes/${encodeURIComponent(sandboxId)}`;

export const INTERNAL_PATHS = {
  /** POST `{count, local, timeout?, metadata?}`: capture, start `local` here, spill the rest. */
  spillingFork: (sandboxId: string) => `${sandbox(sandboxId)}/fork`,
  /** POST `{count, timeout?, metadata?}`: children from a capture another node spilled. */
  forkFromCapture: (sandboxId: string, snapshotId: string) =>
    `${sandbox(sandboxId)}/fork/${encodeURIComponent(snapshotId)}`,
  /** POST: fetch the snapshot of a paused sandbox claimed for this node and take it in. */
  adopt: (sandboxId: string) => `${sandbox(sandboxId)}/adopt`,
  /** POST: stop taking sandboxes, pause the running ones, publish the paused ones. */
  drain: `${INTERNAL_API_PREFIX}/node/drain`,
  /** POST: take sandboxes again. */
  undrain: `${INTERNAL_API_PREFIX}/node/undrain`,
} as const;
