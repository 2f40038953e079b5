import type { Logger } from "../shared/index.js";
import type { GatewayCluster, SandboxLocation } from "./cluster.js";
import type { NodeTarget } from "./forward.js";
import type { NodeDirectory } from "./node-directory.js";
import { rankNodes } from "./placement.js";

export interface RelocateOptions {
  readonly cluster: GatewayCluster;
  readonly directory: NodeDirectory;
  readonly heartbeatTimeoutMs: number;
  /** Tells the node a sandbox was claimed for it (the internal node API's adopt). */
  readonly adopt: (target: NodeTarget, sandboxId: string) => Promise<void>;
  readonly logger: Logger;
}

/**
 * Where a paused sandbox resumes when its node cannot take it (down or draining): the best
 * up node with room for its shape, claimed in the catalog (claimSandbox, a compare-and-set),
 * so that racing gateways agree; the new node then fetches its snapshot from the shared store
 * and takes it in (adopt) before the call that resumes it is relayed there.
 * Undefined when it stays: no node has room, or the claim lost (its snapshot is not
 * published, or another gateway moved it first: the caller locates it again).
 */
export async function relocatePaused(
  sandboxId: string,
  location: SandboxLocation,
  options: RelocateOptions,
): Promise<NodeTarget | undefined> {
  const { directory } = options;
  const shape = { vcpus: location.vcpus, memoryMiB: location.memoryMiB };
  const [best] = rankNodes(
    await directory.nodes(),
    { templateId: "", ...shape },
    directory.reserved,
    {
      heartbeatTimeoutMs: options.heartbeatTimeoutMs,
      sinceReadMs: directory.sinceReadMs,
      exclude: new Set([location.nodeId]),
    },
  );
  if (!best) return undefined;
  // Counted at once, as a create's is: resumes moved together spread over the nodes.
  const release = directory.reserve(best, shape);
  if (!(await options.cluster.claimSandbox(sandboxId, best.id, location.nodeId))) {
    release();
    return undefined;
  }
  options.logger.info(
    { sandboxId, from: location.nodeId, to: best.id, fromState: location.nodeState },
    "gateway.sandbox_moved",
  );
  const target = { nodeId: best.id, url: best.url };
  await options.adopt(target, sandboxId);
  return target;
}
